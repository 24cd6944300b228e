package outbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
)

func TestRelayNotify(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	const appName = "outbox_relay_notify_test"
	relayPool, err := postgres.Open(ctxT(t), withAppName(t, db.URL, appName))
	require.NoError(t, err)
	t.Cleanup(relayPool.Close)

	cfg := testConfig()
	cfg.PollInterval = time.Hour // only a notification can wake it
	cfg.Notify = true
	r := newRelay(t, relayPool, cfg, handle(ok))
	require.NoError(t, r.Start(ctxT(t)))
	listening := func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctxT(t), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1 AND application_name = $2 AND query LIKE 'LISTEN%'`, db.Name, appName).Scan(&n))
		return n == 1
	}
	require.Eventually(t, listening, 10*time.Second, 10*time.Millisecond)

	t.Run("a row appended elsewhere, with no nudge, is delivered at once", func(t *testing.T) {
		for i := range 3 { // more than once: the nudge the relay gives itself on LISTEN cannot cover them all
			id := appendEvents(t, db.Pool, thing{N: i})[0]
			require.Eventually(t, func() bool { return getRow(t, db.Pool, id).ProcessedAt != nil },
				10*time.Second, 10*time.Millisecond)
		}
	})

	t.Run("a rolled-back append notifies nobody and leaves nothing", func(t *testing.T) {
		tx, err := db.Pool.Begin(ctxT(t))
		require.NoError(t, err)
		_, err = outbox.Append(ctxT(t), tx, thing{N: 2})
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctxT(t)))
		require.Zero(t, count(t, db.Pool, "processed_at IS NULL"))
	})

	t.Run("the relay listens again after its connection is cut", func(t *testing.T) {
		exec(t, db.Pool, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = $1 AND application_name = $2 AND query LIKE 'LISTEN%'`, db.Name, appName)
		require.Eventually(t, listening, 10*time.Second, 10*time.Millisecond)
		id := appendEvents(t, db.Pool, thing{N: 3})[0]
		require.Eventually(t, func() bool { return getRow(t, db.Pool, id).ProcessedAt != nil },
			10*time.Second, 10*time.Millisecond)
	})
}

func TestRelayFindsRowsBelowItsScanFloor(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	cfg := testConfig()
	cfg.PollInterval = 20 * time.Millisecond
	r := newRelay(t, db.Pool, cfg, handle(ok))
	require.NoError(t, r.Start(ctxT(t)))
	recent := appendEvents(t, db.Pool, thing{N: 1})[0]
	require.Eventually(t, func() bool { return getRow(t, db.Pool, recent).ProcessedAt != nil },
		10*time.Second, 10*time.Millisecond)

	// The floor is now close to the present. A row created an hour ago (a
	// transaction that committed late, or a retry whose delay ran out) lies
	// below it; the periodic sweep from the bottom must still find it.
	old := uuid.Must(uuid.NewV7())
	hourAgo := time.Now().Add(-time.Hour).UnixMilli()
	exec(t, db.Pool, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
		VALUES ($1, 'Thing', '{}', $2, $2, 0)`, old, hourAgo)
	require.Eventually(t, func() bool { return getRow(t, db.Pool, old).ProcessedAt != nil },
		15*time.Second, 20*time.Millisecond, "a row below the floor is delivered after a sweep")
}

func TestRelaySettleFailures(t *testing.T) {
	t.Parallel()
	const block = `
		CREATE FUNCTION refuse_processed() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'settles are refused'; END; $$;
		CREATE TRIGGER refuse_processed BEFORE UPDATE ON outbox_events
		FOR EACH ROW WHEN (NEW.processed_at IS NOT NULL) EXECUTE FUNCTION refuse_processed();`
	const unblock = `DROP TRIGGER refuse_processed ON outbox_events`

	t.Run("a failed settle is kept and retried, not delivered again", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		exec(t, db.Pool, block)
		var calls atomic.Int32
		r := newRelay(t, db.Pool, testConfig(), handle(func(context.Context, outbox.Message) error {
			calls.Add(1)
			return nil
		}))
		id := appendEvents(t, db.Pool, thing{N: 1})[0]
		require.NoError(t, r.Start(ctxT(t)))
		require.Eventually(t, func() bool { return calls.Load() == 1 }, 10*time.Second, 10*time.Millisecond)
		require.Nil(t, getRow(t, db.Pool, id).ProcessedAt, "the settle is refused")

		exec(t, db.Pool, unblock)
		require.Eventually(t, func() bool { return getRow(t, db.Pool, id).ProcessedAt != nil },
			10*time.Second, 10*time.Millisecond, "the kept outcome is settled once the database takes it")
		require.EqualValues(t, 1, calls.Load(), "delivered once")
		require.Nil(t, getRow(t, db.Pool, id).ClaimedUntil)
	})

	t.Run("Stop releases a row whose settle it could not make", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		exec(t, db.Pool, block)
		var calls atomic.Int32
		r, err := outbox.NewRelay(db.Pool, testConfig(), []outbox.Subscriber{handle(func(context.Context, outbox.Message) error {
			calls.Add(1)
			return nil
		})}, testLogger(t))
		require.NoError(t, err)
		id := appendEvents(t, db.Pool, thing{N: 1})[0]
		require.NoError(t, r.Start(ctxT(t)))
		require.Eventually(t, func() bool { return calls.Load() == 1 }, 10*time.Second, 10*time.Millisecond)

		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx), "the release succeeds where the settle could not")
		got := getRow(t, db.Pool, id)
		require.Nil(t, got.ClaimedUntil, "released, not left leased until its lease ends")
		require.Nil(t, got.ProcessedAt)
		require.Equal(t, 1, got.Attempts)
	})
}

func TestRelayLeaseMargin(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	cfg := testConfig()
	// The contract's rule holds (1 × 1s ≤ 1s) but leaves no time to settle.
	cfg.ClaimSize, cfg.HandlerTimeout, cfg.Lease = 1, time.Second, time.Second
	left := make(chan time.Duration, 1)
	r := newRelay(t, db.Pool, cfg, handle(func(ctx context.Context, _ outbox.Message) error {
		deadline, _ := ctx.Deadline()
		left <- time.Until(deadline)
		<-ctx.Done()
		return ctx.Err()
	}))
	id := appendEvents(t, db.Pool, thing{N: 1})[0]
	n, err := r.RunOnce(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.LessOrEqual(t, <-left, cfg.Lease-outbox.LeaseMargin(cfg.Lease), "the dispatch is cut off a margin before the lease ends")
	got := getRow(t, db.Pool, id)
	require.Nil(t, got.ClaimedUntil, "settled by this relay, within its lease")
	require.Equal(t, 1, got.Attempts)
	require.Contains(t, *got.LastError, "deadline exceeded")
}

package outbox_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

func TestRelayNotify(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	const appName = "outbox_relay_notify_test"
	bPool, err := postgres.Open(ctxT(t), withAppName(t, db.URL, appName))
	require.NoError(t, err)
	t.Cleanup(bPool.Close)

	// Replica A has one slot, held by a delivery that does not end: it cannot
	// take the rows it appends, so only replica B can deliver them.
	aCfg := testConfig()
	aCfg.ClaimSize, aCfg.Notify = 1, true
	aCfg.HandlerTimeout, aCfg.Lease = time.Minute, 10*time.Minute
	held, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	a := newRelay(t, pg(db.Pool), aCfg, handle(func(context.Context, outbox.Message) error {
		once.Do(func() { close(held) })
		<-release
		return nil
	}))
	appendEvents(t, pg(db.Pool), thing{N: 0})
	require.NoError(t, a.Start(ctxT(t)))
	<-held
	t.Cleanup(func() { close(release) })

	// Replica B polls once an hour: only a notification can wake it.
	bCfg := testConfig()
	// Its lease is A's: a claim more than twice B's lease ahead would look like a
	// clock that ran ahead, and B would take the row A holds.
	bCfg.PollInterval, bCfg.Notify, bCfg.Lease = time.Hour, true, aCfg.Lease
	b := newRelay(t, pg(bPool), bCfg, handle(ok))
	require.NoError(t, b.Start(ctxT(t)))
	listening := func() bool {
		var n int
		require.NoError(t, db.Pool.QueryRow(ctxT(t), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = $1 AND application_name = $2 AND query LIKE 'LISTEN%'`, db.Name, appName).Scan(&n))
		return n == 1
	}
	require.Eventually(t, listening, 10*time.Second, 10*time.Millisecond)

	deliveredByB := func(t *testing.T, n int) {
		id := appendEvents(t, pg(db.Pool), thing{N: n})[0]
		a.Nudge() // what A's use case does after its commit
		require.Eventually(t, func() bool { return getRow(t, pg(db.Pool), id).ProcessedAt != nil },
			10*time.Second, 10*time.Millisecond, "row %d delivered by the other replica at once", n)
	}

	t.Run("a row appended on one replica is delivered at once by another", func(t *testing.T) {
		for n := 1; n <= 3; n++ {
			deliveredByB(t, n)
		}
	})

	t.Run("the relay listens again after its connection is cut", func(t *testing.T) {
		exec(t, pg(db.Pool), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = $1 AND application_name = $2 AND query LIKE 'LISTEN%'`, db.Name, appName)
		require.Eventually(t, listening, 10*time.Second, 10*time.Millisecond)
		for n := 4; n <= 5; n++ {
			deliveredByB(t, n)
		}
	})
}

func TestRelayFindsRowsBelowItsScanFloor(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)
		cfg := testConfig()
		cfg.PollInterval = 20 * time.Millisecond
		r := newRelay(t, db, cfg, handle(ok))
		require.NoError(t, r.Start(ctxT(t)))
		recent := appendEvents(t, db, thing{N: 1})[0]
		require.Eventually(t, func() bool { return getRow(t, db, recent).ProcessedAt != nil },
			10*time.Second, 10*time.Millisecond)

		// The floor is now close to the present. A row created an hour ago (a
		// transaction that committed late, or a retry whose delay ran out) lies
		// below it; the periodic sweep from the bottom must still find it.
		old := uuid.Must(uuid.NewV7())
		hourAgo := time.Now().Add(-time.Hour).UnixMilli()
		exec(t, db, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
		VALUES ($1, 'Thing', '{}', $2, $2, 0)`, old, hourAgo)
		require.Eventually(t, func() bool { return getRow(t, db, old).ProcessedAt != nil },
			15*time.Second, 20*time.Millisecond, "a row below the floor is delivered after a sweep")
	})
}

func TestRelaySettleFailures(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		block := `
		CREATE FUNCTION refuse_processed() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'settles are refused'; END; $$;
		CREATE TRIGGER refuse_processed BEFORE UPDATE ON outbox_events
		FOR EACH ROW WHEN (NEW.processed_at IS NOT NULL) EXECUTE FUNCTION refuse_processed();`
		unblock := `DROP TRIGGER refuse_processed ON outbox_events`
		if d == sqldb.SQLite {
			block = `
			CREATE TRIGGER refuse_processed BEFORE UPDATE ON outbox_events
			FOR EACH ROW WHEN NEW.processed_at IS NOT NULL
			BEGIN SELECT RAISE(ABORT, 'settles are refused'); END`
			unblock = `DROP TRIGGER refuse_processed`
		}

		t.Run("a failed settle is kept and retried, not delivered again", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			exec(t, db, block)
			var calls atomic.Int32
			r := newRelay(t, db, testConfig(), handle(func(context.Context, outbox.Message) error {
				calls.Add(1)
				return nil
			}))
			id := appendEvents(t, db, thing{N: 1})[0]
			require.NoError(t, r.Start(ctxT(t)))
			require.Eventually(t, func() bool { return calls.Load() == 1 }, 10*time.Second, 10*time.Millisecond)
			require.Nil(t, getRow(t, db, id).ProcessedAt, "the settle is refused")

			exec(t, db, unblock)
			require.Eventually(t, func() bool { return getRow(t, db, id).ProcessedAt != nil },
				10*time.Second, 10*time.Millisecond, "the kept outcome is settled once the database takes it")
			require.EqualValues(t, 1, calls.Load(), "delivered once")
			require.Nil(t, getRow(t, db, id).ClaimedUntil)
		})

		t.Run("Stop releases a row whose settle it could not make", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			exec(t, db, block)
			var calls atomic.Int32
			r, err := outbox.NewRelay(storeOf(t, db), testConfig(), []outbox.Subscriber{handle(func(context.Context, outbox.Message) error {
				calls.Add(1)
				return nil
			})}, testLogger(t))
			require.NoError(t, err)
			id := appendEvents(t, db, thing{N: 1})[0]
			require.NoError(t, r.Start(ctxT(t)))
			require.Eventually(t, func() bool { return calls.Load() == 1 }, 10*time.Second, 10*time.Millisecond)

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			require.NoError(t, r.Stop(ctx), "the release succeeds where the settle could not")
			got := getRow(t, db, id)
			require.Nil(t, got.ClaimedUntil, "released, not left leased until its lease ends")
			require.Nil(t, got.ProcessedAt)
			require.Equal(t, 1, got.Attempts)
		})
	})
}

func TestRelayLeaseMargin(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)
		cfg := testConfig()
		// The contract's rule holds (1 × 1s ≤ 1s) but leaves no time to settle.
		cfg.ClaimSize, cfg.HandlerTimeout, cfg.Lease = 1, time.Second, time.Second
		left := make(chan time.Duration, 1)
		r := newRelay(t, db, cfg, handle(func(ctx context.Context, _ outbox.Message) error {
			deadline, _ := ctx.Deadline()
			left <- time.Until(deadline)
			<-ctx.Done()
			return ctx.Err()
		}))
		id := appendEvents(t, db, thing{N: 1})[0]
		n, err := r.RunOnce(ctxT(t))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.LessOrEqual(t, <-left, cfg.Lease-outbox.LeaseMargin(cfg.Lease), "the dispatch is cut off a margin before the lease ends")
		got := getRow(t, db, id)
		require.Nil(t, got.ClaimedUntil, "settled by this relay, within its lease")
		require.Equal(t, 1, got.Attempts)
		require.Contains(t, *got.LastError, "deadline exceeded")
	})
}

func TestRelayWorkers(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)
		appendEvents(t, db, things(20)...)

		// Two rows a claim, six in flight: the handler holds every row it gets, so
		// the relay fills its six workers, in claims of at most two, and stops there.
		cfg := testConfig()
		cfg.ClaimSize, cfg.Workers = 2, 6
		cfg.HandlerTimeout, cfg.Lease = 30*time.Second, 10*time.Minute
		var inFlight atomic.Int32
		release := make(chan struct{})
		r := newRelay(t, db, cfg, handle(func(ctx context.Context, _ outbox.Message) error {
			inFlight.Add(1)
			defer inFlight.Add(-1)
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
		require.NoError(t, r.Start(ctxT(t)))
		require.Eventually(t, func() bool { return inFlight.Load() == 6 }, 10*time.Second, 5*time.Millisecond,
			"six rows in flight at once, more than one claim's two")
		require.Never(t, func() bool { return count(t, db, "claimed_until IS NOT NULL") > 6 },
			300*time.Millisecond, 20*time.Millisecond, "no row is claimed beyond the free workers")
		close(release)
		require.Eventually(t, func() bool { return count(t, db, "processed_at IS NULL") == 0 }, 10*time.Second, 10*time.Millisecond)
	})
}

package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/internal/testsupport/proxytest"
)

func TestRelayStopsWithinItsDeadlineWhenTheDatabaseIsUnreachable(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	dbURL, hole := proxytest.Via(t, db.URL)
	pool, err := pgxpool.New(ctxT(t), dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	t.Cleanup(hole.Close) // before the pool's: a blackholed connection never answers its goodbye

	cfg := testConfig()
	cfg.PollInterval, cfg.Notify = time.Hour, true
	const rows = 6
	entered := make(chan struct{}, rows)
	finish := make(chan struct{})
	r := newRelay(t, pg(pool), cfg, handle(func(ctx context.Context, _ outbox.Message) error {
		entered <- struct{}{}
		select {
		case <-finish:
			return nil // delivered, but its settle never reaches the database
		case <-ctx.Done():
			return ctx.Err()
		}
	}))
	ids := appendEvents(t, pg(db.Pool), things(rows)...)
	require.NoError(t, r.Start(ctxT(t)))
	for range rows {
		<-entered
	}

	hole.Partition()
	close(finish) // the settler's flush of these outcomes now hangs
	r.Nudge()     // and so does a claim for the free slots
	require.Eventually(t, func() bool {
		st := r.Pool().Stat() // the relay's own connections
		return st.AcquiredConns()+st.ConstructingConns() >= 2
	}, 5*time.Second, time.Millisecond, "a flush and a claim wait for the database")
	const budget = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	defer cancel()
	start := time.Now()
	err = r.Stop(ctx)
	took := time.Since(start)
	require.Error(t, err, "nothing could be settled or released")
	require.Less(t, took, budget+250*time.Millisecond, "Stop returns by its deadline; took %s", took)
	// The pools close next: the claim that was waiting must not hold one of
	// the relay's connections for its own timeout (15s).
	select {
	case <-r.LoopDone():
	case <-time.After(time.Second):
		t.Fatal("the claim loop still waits for the database after Stop returned")
	}

	// Left to their lease, never lost: still pending and claimed, and another
	// relay takes them once the lease has run out.
	for _, id := range ids {
		got := getRow(t, pg(db.Pool), id)
		require.Nil(t, got.ProcessedAt)
		require.Nil(t, got.FailedAt)
		require.NotNil(t, got.ClaimedUntil)
	}
	clk := newClock()
	clk.Add(cfg.Lease + time.Second)
	later := testConfig()
	later.Now = clk.Now
	b := newRelay(t, pg(db.Pool), later, handle(ok))
	claimed, err := b.RunOnce(ctxT(t))
	require.NoError(t, err)
	require.Equal(t, rows, claimed)
	require.Equal(t, rows, count(t, pg(db.Pool), "processed_at IS NOT NULL AND attempts = 2"))
}

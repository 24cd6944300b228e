package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
)

// BenchmarkAppend measures Append: alone in its own committed transaction (the
// shape of a use case's write, dominated by the commit's WAL flush), and inside
// an open transaction (what Append adds to a use case's own transaction).
func BenchmarkAppend(b *testing.B) {
	ctx := context.Background()

	b.Run("own transaction", func(b *testing.B) {
		db := newDB(b)
		start := time.Now()
		for b.Loop() {
			err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				_, err := outbox.Append(ctx, tx, thing{N: 1})
				return err
			})
			if err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "appends/s")
	})

	b.Run("inside a transaction", func(b *testing.B) {
		db := newDB(b)
		tx, err := db.Pool.Begin(ctx)
		require.NoError(b, err)
		defer tx.Rollback(ctx) //nolint:errcheck
		start := time.Now()
		for b.Loop() {
			if _, err := outbox.Append(ctx, tx, thing{N: 1}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "appends/s")
	})
}

// BenchmarkRelayThroughput measures rows delivered per second by relays with a
// no-op handler, from a backlog of rows appended up front, and the database
// commits the relays made per row (from pg_stat_database; the relays run on a
// pool of their own that is closed, so its backends flush their counters,
// before the count is read; the completion polls are subtracted).
func BenchmarkRelayThroughput(b *testing.B) {
	for _, bc := range []struct {
		name          string
		relays, claim int
	}{
		{"1 relay claim 10", 1, 10},
		{"1 relay claim 50", 1, 50},
		{"4 relays claim 10", 4, 10},
	} {
		b.Run(bc.name, func(b *testing.B) {
			const rows = 2000
			var delivered time.Duration
			var total, commits int
			for b.Loop() {
				b.StopTimer()
				db := newDB(b)
				appendEvents(b, db.Pool, things(rows)...)
				relayPool, err := postgres.Open(context.Background(), db.URL)
				require.NoError(b, err)
				cfg := testConfig()
				cfg.ClaimSize, cfg.PollInterval, cfg.HandlerTimeout = bc.claim, 5*time.Millisecond, time.Second
				relays := make([]*outbox.Relay, bc.relays)
				for i := range relays {
					r, err := outbox.NewRelay(relayPool, cfg, []outbox.Subscriber{handle(ok)}, nil)
					require.NoError(b, err)
					relays[i] = r
				}
				before := xactCommits(b, db)
				polls := 0
				b.StartTimer()
				start := time.Now()
				for _, r := range relays {
					require.NoError(b, r.Start(context.Background()))
				}
				for polls = 1; count(b, db.Pool, "processed_at IS NULL") > 0; polls++ {
					time.Sleep(2 * time.Millisecond)
				}
				delivered += time.Since(start)
				total += rows
				b.StopTimer()
				for _, r := range relays {
					require.NoError(b, r.Stop(context.Background()))
				}
				relayPool.Close()
				commits += xactCommits(b, db) - before - polls - 1
				b.StartTimer()
			}
			b.ReportMetric(float64(total)/delivered.Seconds(), "rows/s")
			b.ReportMetric(float64(total)/float64(max(commits, 1)), "rows/commit")
		})
	}
}

// xactCommits is the database's commit count, once the counters of backends
// that exited have been flushed.
func xactCommits(b *testing.B, db *pgtest.DB) int {
	b.Helper()
	time.Sleep(100 * time.Millisecond) // exiting backends flush their counters as they go
	var n int
	require.NoError(b, db.Pool.QueryRow(context.Background(),
		`SELECT xact_commit FROM pg_stat_database WHERE datname = $1`, db.Name).Scan(&n))
	return n
}

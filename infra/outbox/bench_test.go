package outbox_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
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
				_, err := outbox.Append(ctx, outbox.NewPostgresStore(nil), postgres.TxOf(tx), thing{N: 1})
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
			if _, err := outbox.Append(ctx, outbox.NewPostgresStore(nil), postgres.TxOf(tx), thing{N: 1}); err != nil {
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
				appendEvents(b, pg(db.Pool), things(rows)...)
				relayPool, err := postgres.Open(context.Background(), db.URL)
				require.NoError(b, err)
				cfg := testConfig()
				cfg.ClaimSize, cfg.PollInterval, cfg.HandlerTimeout = bc.claim, 5*time.Millisecond, time.Second
				relays := make([]*outbox.Relay, bc.relays)
				for i := range relays {
					r, err := outbox.NewRelay(outbox.NewPostgresStore(relayPool), cfg, []outbox.Subscriber{handle(ok)}, nil)
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
				for polls = 1; count(b, pg(db.Pool), "processed_at IS NULL") > 0; polls++ {
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

// BenchmarkCrossReplicaWakeup measures, per row, the time from the appending
// commit on replica A to the start of its delivery on replica B, with
// OUTBOX_NOTIFY's default (true: A's Nudge is broadcast over its LISTEN
// connection and wakes B at once) and with it off (B finds the row at its next
// poll, every second by default). A has a single slot, held by a delivery that
// never ends, so only B can take the rows A appends. Run it with a fixed count:
//
//	go test -run '^$' -bench CrossReplicaWakeup -benchtime 50x ./infra/outbox/
func BenchmarkCrossReplicaWakeup(b *testing.B) {
	for _, notify := range []bool{true, false} {
		name := "notify on"
		if !notify {
			name = "notify off"
		}
		b.Run(name, func(b *testing.B) {
			db := newDB(b)
			ctx := context.Background()
			bPool, err := postgres.Open(ctx, db.URL)
			require.NoError(b, err)
			b.Cleanup(bPool.Close)

			aCfg := testConfig()
			aCfg.ClaimSize, aCfg.Notify, aCfg.PollInterval = 1, notify, time.Second
			aCfg.HandlerTimeout, aCfg.Lease = time.Minute, 10*time.Minute
			held, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			a := newRelay(b, pg(db.Pool), aCfg, handle(func(context.Context, outbox.Message) error {
				once.Do(func() { close(held) })
				<-release
				return nil
			}))
			appendEvents(b, pg(db.Pool), thing{N: -1})
			require.NoError(b, a.Start(ctx))
			<-held
			b.Cleanup(func() { close(release) })

			// Replica B as the binaries configure it: poll every second.
			// Its lease is A's: a claim more than twice B's lease ahead would look
			// like a clock that ran ahead, and B would take A's held row.
			type start struct {
				id uuid.UUID
				at time.Time
			}
			started := make(chan start, 1)
			bCfg := testConfig()
			bCfg.PollInterval, bCfg.Notify, bCfg.Lease = time.Second, notify, aCfg.Lease
			rb := newRelay(b, pg(bPool), bCfg, handle(func(_ context.Context, m outbox.Message) error {
				started <- start{m.ID, time.Now()}
				return nil
			}))
			require.NoError(b, rb.Start(ctx))
			time.Sleep(200 * time.Millisecond) // B's LISTEN is set up; a wake-up lost before it would count as a poll

			var lat []time.Duration
			for b.Loop() {
				tx, err := db.Pool.Begin(ctx)
				require.NoError(b, err)
				id, err := outbox.Append(ctx, outbox.NewPostgresStore(nil), postgres.TxOf(tx), thing{N: 1})
				require.NoError(b, err)
				require.NoError(b, tx.Commit(ctx))
				committed := time.Now()
				a.Nudge() // what A's use case does after its commit
				select {
				case s := <-started:
					require.Equal(b, id, s.id, "B delivers the row just appended, and only it")
					lat = append(lat, s.at.Sub(committed))
				case <-time.After(10 * time.Second):
					b.Fatal("replica B never delivered the row")
				}
			}
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50_ms")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99_ms")
		})
	}
}

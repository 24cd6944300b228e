package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
)

// BenchmarkFanoutLatency measures a healthy subscriber's latency (from the
// appending commit to its handler's call) while a second subscriber of every
// event is down (each delivery to it refused at once, retried with the
// default backoff) for OUTBOX_BENCH_FANOUT_SECONDS, beside the same load with
// the healthy subscriber alone (no route, today's setup). Events are appended
// one a transaction at OUTBOX_BENCH_FANOUT_RATE a second (default 200) by
// concurrent producers, on PostgreSQL, with the relay at its defaults. It
// reports p50, p99 and max in ms, and the down subscriber's pending rows at
// the end. Without the variable it is skipped (it takes twice its duration):
//
//	OUTBOX_BENCH_FANOUT_SECONDS=120 go test -run '^$' -bench FanoutLatency -benchtime 1x ./infra/outbox/
func BenchmarkFanoutLatency(b *testing.B) {
	seconds, _ := strconv.Atoi(os.Getenv("OUTBOX_BENCH_FANOUT_SECONDS"))
	if seconds <= 0 {
		b.Skip("set OUTBOX_BENCH_FANOUT_SECONDS to run it")
	}
	rate := 200
	if r, err := strconv.Atoi(os.Getenv("OUTBOX_BENCH_FANOUT_RATE")); err == nil && r > 0 {
		rate = r
	}
	for _, bc := range []struct {
		name string
		down bool
	}{{"alone", false}, {"other down", true}} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				lat, backlog := fanoutRun(b, time.Duration(seconds)*time.Second, rate, bc.down)
				slices.Sort(lat)
				q := func(p float64) float64 { return float64(lat[int(p*float64(len(lat)-1))].Microseconds()) / 1000 }
				b.ReportMetric(q(0.50), "p50_ms")
				b.ReportMetric(q(0.99), "p99_ms")
				b.ReportMetric(q(1), "max_ms")
				b.ReportMetric(float64(len(lat)), "events")
				b.ReportMetric(float64(backlog), "down_pending")
			}
		})
	}
}

// fanoutRun appends at rate for d and returns the healthy subscriber's
// latencies and, with down, the down subscriber's pending rows at the end.
func fanoutRun(b *testing.B, d time.Duration, rate int, down bool) ([]time.Duration, int) {
	b.StopTimer()
	defer b.StartTimer()
	db := newDB(b)
	var routes []outbox.Route
	var lanes []outbox.Lane
	if down {
		routes = []outbox.Route{ledgerRoute}
		refused := func(context.Context, outbox.Message) error { return errors.New("dial tcp: connection refused") }
		lanes = []outbox.Lane{{Subscriber: "ledger", Subscribers: fanSub(refused)}}
	}
	var committed sync.Map // event id → commit time
	var mu sync.Mutex
	var lat []time.Duration
	healthy := func(_ context.Context, m outbox.Message) error {
		at, ok := committed.Load(m.ID)
		for !ok { // the handler may run before the producer stored the time
			time.Sleep(time.Millisecond)
			at, ok = committed.Load(m.ID)
		}
		mu.Lock()
		lat = append(lat, time.Since(at.(time.Time)))
		mu.Unlock()
		return nil
	}
	relayPool, err := postgres.Open(context.Background(), db.URL)
	require.NoError(b, err)
	defer relayPool.Close()
	l, err := outbox.NewLanes(outbox.NewPostgresStore(relayPool), outbox.DefaultConfig(), fanSub(healthy), lanes, slog.New(slog.DiscardHandler))
	require.NoError(b, err)
	require.NoError(b, l.Start(context.Background()))
	store := outbox.NewPostgresStore(nil, outbox.WithRoutes(routes...))

	const producers = 8
	tick := time.Second * producers / time.Duration(rate)
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var wg sync.WaitGroup
	var sent sync.WaitGroup
	for range producers {
		wg.Go(func() {
			t := time.NewTicker(tick)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
				tx, err := db.Pool.Begin(context.Background())
				require.NoError(b, err)
				id, err := outbox.Append(context.Background(), store, postgres.TxOf(tx), fanEvent{N: 1})
				require.NoError(b, err)
				require.NoError(b, tx.Commit(context.Background()))
				committed.Store(id, time.Now())
				sent.Add(1)
				l.Nudge()
			}
		})
	}
	b.StartTimer()
	wg.Wait()
	b.StopTimer()
	require.Eventually(b, func() bool { return count(b, pg(db.Pool), "subscriber = '' AND processed_at IS NULL") == 0 },
		time.Minute, 10*time.Millisecond)
	backlog := count(b, pg(db.Pool), "subscriber = 'ledger' AND processed_at IS NULL AND failed_at IS NULL")
	stopCtx, stop := context.WithTimeout(context.Background(), 10*time.Second)
	defer stop()
	require.NoError(b, l.Stop(stopCtx))
	mu.Lock()
	defer mu.Unlock()
	return append([]time.Duration(nil), lat...), backlog
}

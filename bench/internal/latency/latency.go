// Package latency measures commit-to-effect latency at offered rates, commit
// to commit, by the database's own clock: a deferred constraint trigger fires
// at the producer's commit (the row that carries the event: outbox_events, or
// river_job) and another at the consumer's (billing_receipts), each writing
// clock_timestamp() into a side table of its database (db.StampSQL). Both
// databases are on one server, so it is one clock. The triggers exist only in
// the benchmark's own databases. On SQLite the stamps are triggers at the
// INSERT, inside the committing transaction (package drain says how).
package latency

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/bench/internal/db"
	"github.com/acme/outboxpair/bench/internal/producer"
	"github.com/acme/outboxpair/bench/internal/report"
	"github.com/acme/outboxpair/bench/internal/sitting"
	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/labeling"
)

// Outcome is the outcome of one offered-rate run. The percentiles are over
// every event offered (latencyOver): an event that was never applied (its send
// skipped or failed, or committed but not applied within the grace period)
// counts as +Inf, beyond any latency measured, so a system that drops or
// defers work cannot look faster for it.
type Outcome struct {
	p50, p99, max float64 // ms; +Inf where the rank falls among the unapplied
	backlog       int64   // committed but not yet applied when the offered load ended
	missing       int     // committed, still not applied after the grace period
	committed     int
	applied       int
	gen           Offered
}

// unapplied is every event offered that never took effect.
func (l Outcome) unapplied() int { return max(l.gen.total-l.applied, 0) }

// Offered is what the generator did: the sends it scheduled (every event
// offered), sends skipped because every sender was busy (the producer side did
// not keep up), sends that failed, the first failure.
type Offered struct {
	total        int
	late, failed int64
	firstErr     string
}

// latencyOver returns the p-th percentiles (nearest rank, in ms) of offered
// events, of which sorted are the latencies of the applied ones; the other
// offered − len(sorted) count as +Inf. offered below len(sorted) (more effects
// than sends, which a correct run never has) is taken as len(sorted).
func latencyOver(sorted []time.Duration, offered int, ps ...float64) []float64 {
	n := max(offered, len(sorted))
	out := make([]float64, len(ps))
	for i, p := range ps {
		if n == 0 {
			out[i] = math.NaN()
			continue
		}
		rank := min(max(int(math.Ceil(p/100*float64(n))), 1), n)
		if rank > len(sorted) {
			out[i] = math.Inf(1)
			continue
		}
		out[i] = float64(sorted[rank-1].Microseconds()) / 1000
	}
	return out
}

// Offer calls send at rate per second for d (open loop: a fixed schedule,
// served by up to senders goroutines). A send that cannot start within 100ms
// of its slot is skipped and counted late, so the generator never builds a
// backlog of its own; a failed send is counted and the load goes on. It stops
// by itself after d (slots not started by then are counted late); only the
// caller's ctx ending is an error.
func Offer(ctx context.Context, rate int, d time.Duration, senders int, send func(ctx context.Context, k int) error) (Offered, error) {
	sendCtx, cancel := context.WithTimeout(ctx, d+10*time.Second)
	defer cancel()
	total := int(float64(rate) * d.Seconds())
	out := Offered{total: total}
	slots := make(chan int, senders)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		lateN   atomic.Int64
		failedN atomic.Int64
	)
	for range senders {
		wg.Go(func() {
			for k := range slots {
				if err := send(sendCtx, k); err != nil {
					failedN.Add(1)
					mu.Lock()
					if out.firstErr == "" {
						out.firstErr = err.Error()
					}
					mu.Unlock()
				}
			}
		})
	}
	start := time.Now()
	stopAt := start.Add(d + time.Second)
	interval := time.Second / time.Duration(rate)
	k := 0
loop:
	for ; k < total; k++ {
		at := start.Add(time.Duration(k) * interval)
		if w := time.Until(at); w > 0 {
			select {
			case <-time.After(w):
			case <-ctx.Done():
				break loop
			}
		}
		if time.Now().After(stopAt) {
			break
		}
		select {
		case slots <- k:
		case <-time.After(100 * time.Millisecond):
			lateN.Add(1)
		case <-ctx.Done():
			break loop
		}
	}
	lateN.Add(int64(total - k))
	close(slots)
	wg.Wait()
	out.late, out.failed = lateN.Load(), failedN.Load()
	return out, ctx.Err()
}

// Measure runs the offered load (run returns when it ends), then reads
// the stamps of prod (the producer's database) and cons (billing's): the
// backlog at once, then again after waiting up to grace for the consumer to
// catch up.
func Measure(ctx context.Context, prod, cons db.Querier, grace time.Duration, run func() (Offered, error)) (Outcome, error) {
	gen, err := run()
	if err != nil {
		return Outcome{}, err
	}
	count := func(q db.Querier) (int64, error) {
		var n int64
		err := q.One(ctx, `SELECT count(*) FROM bench_stamp`, &n)
		return n, err
	}
	committed, err := count(prod)
	if err != nil {
		return Outcome{}, err
	}
	applied, err := count(cons)
	if err != nil {
		return Outcome{}, err
	}
	out := Outcome{backlog: committed - applied, gen: gen}
	deadline := time.Now().Add(grace)
	for applied < committed && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return Outcome{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if applied, err = count(cons); err != nil {
			return Outcome{}, err
		}
	}
	commits, err := prod.Stamps(ctx)
	if err != nil {
		return Outcome{}, err
	}
	effects, err := cons.Stamps(ctx)
	if err != nil {
		return Outcome{}, err
	}
	out.committed = len(commits)
	lat := make([]time.Duration, 0, len(commits))
	for id, c := range commits {
		e, ok := effects[id]
		if !ok {
			out.missing++
			continue
		}
		lat = append(lat, e.Sub(c))
	}
	slices.Sort(lat)
	out.applied = len(lat)
	ps := latencyOver(lat, gen.total, 50, 99, 100)
	out.p50, out.p99, out.max = ps[0], ps[1], ps[2]
	return out, nil
}

// Record adds one run's figures to s's results under
// "lat/<system>/<rate>/...", and notes what it did not apply and why.
func Record(s *sitting.Sitting, system string, rate int, l Outcome) {
	k := "lat/" + system + "/" + strconv.Itoa(rate) + "/"
	s.Res.Add(k+"p50", l.p50)
	s.Res.Add(k+"p99", l.p99)
	s.Res.Add(k+"max", l.max)
	s.Res.Add(k+"unapplied", float64(l.unapplied()))
	s.Res.Add(k+"skipped", float64(l.gen.late))
	s.Res.Add(k+"backlog", float64(l.backlog))
	s.Res.Add(k+"achieved", float64(l.committed)/s.Opt.LatencyDuration.Seconds())
	if l.missing > 0 {
		s.Res.Note("%s at %d/s: %d of %d committed events not applied %s after the load ended (counted as +Inf in the percentiles)",
			system, rate, l.missing, l.committed, s.Opt.LatencyGrace)
	}
	if l.gen.late > 0 {
		s.Res.Note("%s at %d/s: the generator skipped %d sends (all %d senders busy): the producer side did not keep up", system, rate, l.gen.late, Senders)
	}
	if l.gen.failed > 0 {
		s.Res.Note("%s at %d/s: %d sends failed (first: %s)", system, rate, l.gen.failed, l.gen.firstErr)
	}
	report.Logf("latency %s @%d/s: p50 %s p99 %s max %s ms over %d offered, not applied %d (skipped %d, failed %d, committed but missing %d), backlog at end %d, committed %d",
		system, rate, report.FormatValue(l.p50), report.FormatValue(l.p99), report.FormatValue(l.max), l.gen.total, l.unapplied(), l.gen.late, l.gen.failed, l.missing, l.backlog, l.committed)
}

// Senders is the generator's concurrency: enough for 3,000/s at a few
// ms per producer transaction.
const Senders = 64

// Project is the in-process relay applying with billing's Apply at rate; the
// producer appends in its own transaction and nudges the relay after the
// commit, as a labeling use case does (on SQLite it is labeling's own use
// case, on the process's one writer).
func Project(ctx context.Context, s *sitting.Sitting, rate int) (Outcome, error) {
	lab, err := db.NewLabeling(ctx, s, true)
	if err != nil {
		return Outcome{}, err
	}
	defer lab.Close()
	bil, err := db.NewBilling(ctx, s, true)
	if err != nil {
		return Outcome{}, err
	}
	defer bil.Close()
	if err := lab.Seed(ctx, Rules); err != nil {
		return Outcome{}, err
	}
	relay, err := sitting.NewRelay(lab.Store, s.Relay, sitting.ApplySubs(billing.NewService(bil.Port, sitting.Quiet())))
	if err != nil {
		return Outcome{}, err
	}
	if err := relay.Start(ctx); err != nil {
		return Outcome{}, err
	}
	defer sitting.StopRelay(relay.Relay) //nolint:errcheck
	produce, closeProducer, err := newProducer(ctx, lab, relay)
	if err != nil {
		return Outcome{}, err
	}
	defer closeProducer()
	return Measure(ctx, lab.Q, bil.Q, s.Opt.LatencyGrace, func() (Offered, error) {
		return Offer(ctx, rate, s.Opt.LatencyDuration, Senders, func(ctx context.Context, k int) error {
			r, active := Toggle(k)
			return produce(ctx, r, active)
		})
	})
}

// newProducer returns the latency figure's producer transaction on lab: on
// PostgreSQL the guarded UPDATE and Append (producer.Activate) on a pool of one
// connection per sender, then the relay's Nudge; on SQLite labeling's own
// Activate and Deactivate, which nudge the relay themselves.
func newProducer(ctx context.Context, lab *db.Labeling, relay sitting.Relay) (func(ctx context.Context, r int, active bool) error, func(), error) {
	if lab.Pool == nil {
		svc := labeling.NewService(lab.Port, relay.Relay)
		return func(ctx context.Context, r int, active bool) error {
			org, err := labeling.ParseOrgID(db.OrgID(r % db.Orgs).String())
			if err != nil {
				return err
			}
			id, err := labeling.ParseRuleID(db.RuleID(r).String())
			if err != nil {
				return err
			}
			if active {
				_, err = svc.Activate(ctx, org, id)
			} else {
				_, err = svc.Deactivate(ctx, org, id)
			}
			return err
		}, func() {}, nil
	}
	prodCfg, err := pgxpool.ParseConfig(lab.URL)
	if err != nil {
		return nil, nil, err
	}
	prodCfg.MaxConns = Senders
	prodPool, err := pgxpool.NewWithConfig(ctx, prodCfg)
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, r int, active bool) error {
		if _, err := producer.Activate(ctx, prodPool, r, active); err != nil {
			return err
		}
		relay.Nudge()
		return nil
	}, prodPool.Close, nil
}

// Rules is how many rules an offered-rate run toggles in turn: at
// 3,000/s a rule comes round again only after more than a second, so no two
// requests on one rule are in flight together.
const Rules = 5000

// Toggle is the k-th activation of an offered-rate run: rule k % Rules,
// activated on even passes, deactivated on odd ones, so every one is a change.
func Toggle(k int) (rule int, active bool) {
	return k % Rules, (k/Rules)%2 == 0
}

// String sums the outcome up in one line.
func (l Outcome) String() string {
	return fmt.Sprintf("p50 %s p99 %s max %s ms, not applied %d of %d, backlog %d",
		report.FormatValue(l.p50), report.FormatValue(l.p99), report.FormatValue(l.max), l.unapplied(), l.gen.total, l.backlog)
}

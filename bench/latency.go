package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/labeling"
)

// Commit-to-effect latency is measured commit to commit, by the database's own
// clock: a deferred constraint trigger fires at the producer's commit (the row
// that carries the event: outbox_events, or river_job) and another at the
// consumer's (billing_receipts), each writing clock_timestamp() into a side table
// of its database. Both databases are on one server, so it is one clock. The
// triggers exist only in the benchmark's own databases.

// stampSQL installs the stamp on table (one of stampKeys), recording the
// event's id: on PostgreSQL a deferred constraint trigger (above), on SQLite,
// which has none, a trigger at the INSERT (sqlite.go).
func stampSQL(lite bool, table string) string {
	if lite {
		return `
CREATE TABLE bench_stamp (id TEXT PRIMARY KEY, at INTEGER NOT NULL);
CREATE TRIGGER bench_stamp AFTER INSERT ON ` + table + ` BEGIN
	INSERT OR IGNORE INTO bench_stamp (id, at) VALUES (` + stampKeys[table][1] + `, CAST(round(unixepoch('subsec') * 1000) AS INTEGER));
END;`
	}
	return `
CREATE TABLE bench_stamp (id uuid PRIMARY KEY, at timestamptz NOT NULL);
CREATE FUNCTION bench_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO bench_stamp (id, at) VALUES (` + stampKeys[table][0] + `, clock_timestamp()) ON CONFLICT DO NOTHING;
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER bench_stamp AFTER INSERT ON ` + table + `
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bench_stamp();`
}

// stampIf is stampSQL when stamp is set, else nothing.
func stampIf(stamp, lite bool, table string) string {
	if !stamp {
		return ""
	}
	return stampSQL(lite, table)
}

// stampKeys is the event id of each stamped table's new row, on PostgreSQL
// and on SQLite (River's args are JSONB there).
var stampKeys = map[string][2]string{
	"outbox_events":    {"NEW.id", "NEW.id"},
	"river_job":        {"(NEW.args->>'id')::uuid", "json_extract(NEW.args, '$.id')"},
	"billing_receipts": {"NEW.event_id", "NEW.event_id"},
}

func installStamp(ctx context.Context, dbURL, sql string) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = pool.Exec(ctx, sql)
	return err
}

// latency is the outcome of one offered-rate run. The percentiles are over
// every event offered (latencyOver): an event that was never applied (its send
// skipped or failed, or committed but not applied within the grace period)
// counts as +Inf, beyond any latency measured, so a system that drops or
// defers work cannot look faster for it.
type latency struct {
	p50, p99, max float64 // ms; +Inf where the rank falls among the unapplied
	backlog       int64   // committed but not yet applied when the offered load ended
	missing       int     // committed, still not applied after the grace period
	committed     int
	applied       int
	gen           offered
}

// unapplied is every event offered that never took effect.
func (l latency) unapplied() int { return max(l.gen.total-l.applied, 0) }

// offered is what the generator did: the sends it scheduled (every event
// offered), sends skipped because every sender was busy (the producer side did
// not keep up), sends that failed, the first failure.
type offered struct {
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

// offer calls send at rate per second for d (open loop: a fixed schedule,
// served by up to senders goroutines). A send that cannot start within 100ms
// of its slot is skipped and counted late, so the generator never builds a
// backlog of its own; a failed send is counted and the load goes on. It stops
// by itself after d (slots not started by then are counted late); only the
// caller's ctx ending is an error.
func offer(ctx context.Context, rate int, d time.Duration, senders int, send func(ctx context.Context, k int) error) (offered, error) {
	sendCtx, cancel := context.WithTimeout(ctx, d+10*time.Second)
	defer cancel()
	total := int(float64(rate) * d.Seconds())
	out := offered{total: total}
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

// measureLatency runs the offered load (run returns when it ends), then reads
// the stamps of prod (the producer's database) and cons (billing's): the
// backlog at once, then again after waiting up to grace for the consumer to
// catch up.
func measureLatency(ctx context.Context, prod, cons db, grace time.Duration, run func() (offered, error)) (latency, error) {
	gen, err := run()
	if err != nil {
		return latency{}, err
	}
	count := func(q db) (int64, error) {
		var n int64
		err := q.one(ctx, `SELECT count(*) FROM bench_stamp`, &n)
		return n, err
	}
	committed, err := count(prod)
	if err != nil {
		return latency{}, err
	}
	applied, err := count(cons)
	if err != nil {
		return latency{}, err
	}
	out := latency{backlog: committed - applied, gen: gen}
	deadline := time.Now().Add(grace)
	for applied < committed && time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return latency{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if applied, err = count(cons); err != nil {
			return latency{}, err
		}
	}
	commits, err := prod.stamps(ctx)
	if err != nil {
		return latency{}, err
	}
	effects, err := cons.stamps(ctx)
	if err != nil {
		return latency{}, err
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

// addLatency records one run's figures under "lat/<system>/<rate>/...".
func (b *bench) addLatency(system string, rate int, l latency) {
	k := "lat/" + system + "/" + strconv.Itoa(rate) + "/"
	b.res.add(k+"p50", l.p50)
	b.res.add(k+"p99", l.p99)
	b.res.add(k+"max", l.max)
	b.res.add(k+"unapplied", float64(l.unapplied()))
	b.res.add(k+"skipped", float64(l.gen.late))
	b.res.add(k+"backlog", float64(l.backlog))
	b.res.add(k+"achieved", float64(l.committed)/b.opt.latencyDuration.Seconds())
	if l.missing > 0 {
		b.res.note("%s at %d/s: %d of %d committed events not applied %s after the load ended (counted as +Inf in the percentiles)",
			system, rate, l.missing, l.committed, b.opt.latencyGrace)
	}
	if l.gen.late > 0 {
		b.res.note("%s at %d/s: the generator skipped %d sends (all %d senders busy): the producer side did not keep up", system, rate, l.gen.late, latencySenders)
	}
	if l.gen.failed > 0 {
		b.res.note("%s at %d/s: %d sends failed (first: %s)", system, rate, l.gen.failed, l.gen.firstErr)
	}
	logf("latency %s @%d/s: p50 %s p99 %s max %s ms over %d offered, not applied %d (skipped %d, failed %d, committed but missing %d), backlog at end %d, committed %d",
		system, rate, formatValue(l.p50), formatValue(l.p99), formatValue(l.max), l.gen.total, l.unapplied(), l.gen.late, l.gen.failed, l.missing, l.backlog, l.committed)
}

// latencySenders is the generator's concurrency: enough for 3,000/s at a few
// ms per producer transaction.
const latencySenders = 64

// projectLatency: in-process relay applying with billing's Apply; the producer
// appends in its own transaction and nudges the relay after the commit, as a
// labeling use case does (on SQLite it is labeling's own use case, on the
// process's one writer).
func (b *bench) projectLatency(ctx context.Context, rate int) (latency, error) {
	lab, err := b.newLabeling(ctx, true)
	if err != nil {
		return latency{}, err
	}
	defer lab.close()
	bil, err := b.newBilling(ctx, true)
	if err != nil {
		return latency{}, err
	}
	defer bil.close()
	if err := lab.seed(ctx, latencyRules); err != nil {
		return latency{}, err
	}
	relay, err := newRelay(lab.store, b.relayCfg, applySubs(billing.NewService(bil.port, quiet())))
	if err != nil {
		return latency{}, err
	}
	if err := relay.Start(ctx); err != nil {
		return latency{}, err
	}
	defer stopRelay(relay.Relay) //nolint:errcheck
	produce, closeProducer, err := b.producer(ctx, lab, relay)
	if err != nil {
		return latency{}, err
	}
	defer closeProducer()
	return measureLatency(ctx, lab.q, bil.q, b.opt.latencyGrace, func() (offered, error) {
		return offer(ctx, rate, b.opt.latencyDuration, latencySenders, func(ctx context.Context, k int) error {
			r, active := toggle(k)
			return produce(ctx, r, active)
		})
	})
}

// producer returns the latency figure's producer transaction on lab: on
// PostgreSQL the guarded UPDATE and Append (activate) on a pool of one
// connection per sender, then the relay's Nudge; on SQLite labeling's own
// Activate and Deactivate, which nudge the relay themselves.
func (b *bench) producer(ctx context.Context, lab *labelingDB, relay relayHandle) (func(ctx context.Context, r int, active bool) error, func(), error) {
	if lab.pool == nil {
		svc := labeling.NewService(lab.port, relay.Relay)
		return func(ctx context.Context, r int, active bool) error {
			org, err := labeling.ParseOrgID(orgID(r % orgs).String())
			if err != nil {
				return err
			}
			id, err := labeling.ParseRuleID(ruleID(r).String())
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
	prodCfg, err := pgxpool.ParseConfig(lab.url)
	if err != nil {
		return nil, nil, err
	}
	prodCfg.MaxConns = latencySenders
	prodPool, err := pgxpool.NewWithConfig(ctx, prodCfg)
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, r int, active bool) error {
		if _, err := activate(ctx, prodPool, r, active); err != nil {
			return err
		}
		relay.nudge()
		return nil
	}, prodPool.Close, nil
}

// latencyRules is how many rules an offered-rate run toggles in turn: at
// 3,000/s a rule comes round again only after more than a second, so no two
// requests on one rule are in flight together.
const latencyRules = 5000

// toggle is the k-th activation of an offered-rate run: rule k % latencyRules,
// activated on even passes, deactivated on odd ones, so every one is a change.
func toggle(k int) (rule int, active bool) {
	return k % latencyRules, (k/latencyRules)%2 == 0
}

// riverLatency: River client, the producer inserting one job per transaction
// (InsertTx), the worker running the consumer transaction.
func (b *bench) riverLatency(ctx context.Context, v riverVariant, rate int) (latency, error) {
	bil, err := b.newBilling(ctx, true)
	if err != nil {
		return latency{}, err
	}
	defer bil.close()
	r, err := b.newRiverDB(ctx, v, bil, true)
	if err != nil {
		return latency{}, err
	}
	defer r.close()
	if err := r.start(ctx); err != nil {
		return latency{}, err
	}
	defer stopRiver(ctx, r) //nolint:errcheck
	return measureLatency(ctx, r.q, bil.q, b.opt.latencyGrace, func() (offered, error) {
		return offer(ctx, rate, b.opt.latencyDuration, latencySenders, func(ctx context.Context, k int) error {
			return r.produce(ctx, consumeArgs{ID: uuid.New(), Org: orgID(k % orgs)})
		})
	})
}

func (l latency) String() string {
	return fmt.Sprintf("p50 %s p99 %s max %s ms, not applied %d of %d, backlog %d",
		formatValue(l.p50), formatValue(l.p99), formatValue(l.max), l.unapplied(), l.gen.total, l.backlog)
}

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
)

// Commit-to-effect latency is measured commit to commit, by the database's own
// clock: a deferred constraint trigger fires at the producer's commit (the row
// that carries the event: outbox_events, or river_job) and another at the
// consumer's (billing_receipts), each writing clock_timestamp() into a side table
// of its database. Both databases are on one server, so it is one clock. The
// triggers exist only in the benchmark's own databases.

// stampSQL installs the trigger on table, recording the key expression.
func stampSQL(table, key string) string {
	return `
CREATE TABLE bench_stamp (id uuid PRIMARY KEY, at timestamptz NOT NULL);
CREATE FUNCTION bench_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO bench_stamp (id, at) VALUES (` + key + `, clock_timestamp()) ON CONFLICT DO NOTHING;
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER bench_stamp AFTER INSERT ON ` + table + `
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bench_stamp();`
}

var (
	stampOutbox   = stampSQL("outbox_events", "NEW.id")
	stampRiver    = stampSQL("river_job", "(NEW.args->>'id')::uuid")
	stampReceipts = stampSQL("billing_receipts", "NEW.event_id")
)

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
// the stamps: the backlog at once, then again after waiting up to grace for the
// consumer to catch up.
func measureLatency(ctx context.Context, producerURL, consumerURL string, grace time.Duration, run func() (offered, error)) (latency, error) {
	prod, err := pgxpool.New(ctx, producerURL)
	if err != nil {
		return latency{}, err
	}
	defer prod.Close()
	cons, err := pgxpool.New(ctx, consumerURL)
	if err != nil {
		return latency{}, err
	}
	defer cons.Close()
	gen, err := run()
	if err != nil {
		return latency{}, err
	}
	count := func(p *pgxpool.Pool) (int64, error) {
		var n int64
		err := p.QueryRow(ctx, `SELECT count(*) FROM bench_stamp`).Scan(&n)
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
	commits, err := stamps(ctx, prod)
	if err != nil {
		return latency{}, err
	}
	effects, err := stamps(ctx, cons)
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

func stamps(ctx context.Context, pool *pgxpool.Pool) (map[uuid.UUID]time.Time, error) {
	rows, err := pool.Query(ctx, `SELECT id, at FROM bench_stamp`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	m := map[uuid.UUID]time.Time{}
	for rows.Next() {
		var id uuid.UUID
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			return nil, err
		}
		m[id] = at
	}
	return m, rows.Err()
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
// labeling use case does.
func (b *bench) projectLatency(ctx context.Context, rate int) (latency, error) {
	labURL, bilURL, drop, err := b.latencyDBs(ctx, schemaLabeling, stampOutbox)
	if err != nil {
		return latency{}, err
	}
	defer drop()
	pool, err := open(ctx, labURL)
	if err != nil {
		return latency{}, err
	}
	defer pool.Close()
	if err := seedRules(ctx, pool, latencyRules/rulesPerClient); err != nil {
		return latency{}, err
	}
	subs, cleanup, err := b.consumerSubs(bilURL)(ctx)
	if err != nil {
		return latency{}, err
	}
	defer cleanup()
	relay, err := newRelay(pool, b.relayCfg, subs)
	if err != nil {
		return latency{}, err
	}
	if err := relay.Start(ctx); err != nil {
		return latency{}, err
	}
	defer stopRelay(relay.Relay) //nolint:errcheck
	prodCfg, err := pgxpool.ParseConfig(labURL)
	if err != nil {
		return latency{}, err
	}
	prodCfg.MaxConns = latencySenders
	prodPool, err := pgxpool.NewWithConfig(ctx, prodCfg)
	if err != nil {
		return latency{}, err
	}
	defer prodPool.Close()
	return measureLatency(ctx, labURL, bilURL, b.opt.latencyGrace, func() (offered, error) {
		return offer(ctx, rate, b.opt.latencyDuration, latencySenders, func(ctx context.Context, k int) error {
			r, active := toggle(k)
			if _, err := activate(ctx, prodPool, r, active); err != nil {
				return err
			}
			relay.nudge()
			return nil
		})
	})
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
	rivURL, bilURL, drop, err := b.latencyDBs(ctx, schemaRiver, stampRiver)
	if err != nil {
		return latency{}, err
	}
	defer drop()
	pool, err := open(ctx, rivURL)
	if err != nil {
		return latency{}, err
	}
	defer pool.Close()
	bil, err := open(ctx, bilURL)
	if err != nil {
		return latency{}, err
	}
	defer bil.Close()
	client, err := newRiver(pool, bil, v)
	if err != nil {
		return latency{}, err
	}
	if err := client.Start(ctx); err != nil {
		return latency{}, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()
	prodCfg, err := pgxpool.ParseConfig(rivURL)
	if err != nil {
		return latency{}, err
	}
	prodCfg.MaxConns = latencySenders
	prodPool, err := pgxpool.NewWithConfig(ctx, prodCfg)
	if err != nil {
		return latency{}, err
	}
	defer prodPool.Close()
	return measureLatency(ctx, rivURL, bilURL, b.opt.latencyGrace, func() (offered, error) {
		return offer(ctx, rate, b.opt.latencyDuration, latencySenders, func(ctx context.Context, k int) error {
			tx, err := prodPool.Begin(ctx)
			if err != nil {
				return err
			}
			defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck
			if _, err := client.InsertTx(ctx, tx, consumeArgs{ID: uuid.New(), Org: orgID(k % orgs)}, nil); err != nil {
				return err
			}
			return tx.Commit(ctx)
		})
	})
}

func (l latency) String() string {
	return fmt.Sprintf("p50 %s p99 %s max %s ms, not applied %d of %d, backlog %d",
		formatValue(l.p50), formatValue(l.p99), formatValue(l.max), l.unapplied(), l.gen.total, l.backlog)
}

package main

import (
	"context"
	"fmt"
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

// latency is the outcome of one offered-rate run.
type latency struct {
	p50, p99, max time.Duration
	backlog       int64 // committed but not yet applied when the offered load ended
	missing       int   // still not applied after the grace period
	committed     int
	gen           offered
}

// offered is what the generator did: sends skipped because every sender was
// busy (the producer side did not keep up), sends that failed, the first failure.
type offered struct {
	late, failed int64
	firstErr     string
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
	slots := make(chan int, senders)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		out     offered
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
	out.p50, out.p99 = percentile(lat, 50), percentile(lat, 99)
	if len(lat) > 0 {
		out.max = lat[len(lat)-1]
	}
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
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.res.add(k+"p50", ms(l.p50))
	b.res.add(k+"p99", ms(l.p99))
	b.res.add(k+"max", ms(l.max))
	b.res.add(k+"backlog", float64(l.backlog))
	b.res.add(k+"achieved", float64(l.committed)/b.opt.latencyDuration.Seconds())
	if l.missing > 0 {
		b.res.note("%s at %d/s: %d of %d events not applied %s after the load ended (left out of the percentiles)",
			system, rate, l.missing, l.committed, b.opt.latencyGrace)
	}
	if l.gen.late > 0 {
		b.res.note("%s at %d/s: the generator skipped %d sends (all %d senders busy): the producer side did not keep up", system, rate, l.gen.late, latencySenders)
	}
	if l.gen.failed > 0 {
		b.res.note("%s at %d/s: %d sends failed (first: %s)", system, rate, l.gen.failed, l.gen.firstErr)
	}
	logf("latency %s @%d/s: p50 %s p99 %s max %s, backlog at end %d, committed %d, missing %d, skipped %d, failed %d",
		system, rate, l.p50, l.p99, l.max, l.backlog, l.committed, l.missing, l.gen.late, l.gen.failed)
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
	return fmt.Sprintf("p50 %s p99 %s max %s backlog %d", l.p50, l.p99, l.max, l.backlog)
}

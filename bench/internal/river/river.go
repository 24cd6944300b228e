// Package river runs River, the queue a Go team would pick instead of the
// outbox, through the same drains and offered rates as the project: at its
// defaults, and tuned (FetchCooldown 1ms), the reference of every River ratio.
package river

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/riverdriver/riversqlite"

	"github.com/acme/outboxpair/bench/internal/db"
	"github.com/acme/outboxpair/bench/internal/drain"
	"github.com/acme/outboxpair/bench/internal/latency"
	"github.com/acme/outboxpair/bench/internal/sitting"
	"github.com/acme/outboxpair/billing"
)

// riverMaxWorkers is the worker count of River's default queue here: the value
// River's own documentation uses.
const riverMaxWorkers = 100

// Variant is River at its defaults, or "tuned" with FetchCooldown 1ms.
type Variant struct {
	Name          string        // as -river names it
	fetchCooldown time.Duration // 0: River's default (100ms)
}

// Tuned is the River every ratio is to; Defaults (FetchCooldown 100ms caps it
// near 1,000 jobs/s) is printed beside it for information only.
const (
	Tuned    = "river-1ms"
	Defaults = "river"
)

// Variants are the variants -river may name, in the order a run measures them.
var Variants = []Variant{
	{Name: Defaults, fetchCooldown: 0},
	{Name: Tuned, fetchCooldown: time.Millisecond},
}

// Selected are the Variants named in names (-river), in Variants' order.
func Selected(names []string) []Variant {
	var vs []Variant
	for _, v := range Variants {
		if slices.Contains(names, v.Name) {
			vs = append(vs, v)
		}
	}
	return vs
}

type noopArgs struct{}

// Kind implements river.JobArgs.
func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

// Work implements river.Worker: it does nothing.
func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// consumeArgs carries what the consumer needs: the event id (the receipt's key)
// and the org.
type consumeArgs struct {
	ID  uuid.UUID `json:"id"`
	Org uuid.UUID `json:"org"`
}

// Kind implements river.JobArgs.
func (consumeArgs) Kind() string { return "bench_consume" }

// consumeFunc is the consumer transaction a worker runs for one event.
type consumeFunc func(ctx context.Context, id, org uuid.UUID) error

// consumeWorker runs the consumer transaction on the billing database: on
// PostgreSQL the SQL of billing's store (consumeTx), on SQLite billing's own
// Apply, the relay's subscriber's code.
type consumeWorker struct {
	river.WorkerDefaults[consumeArgs]
	consume consumeFunc
}

// Work implements river.Worker: the consumer transaction for the job's event.
func (w *consumeWorker) Work(ctx context.Context, j *river.Job[consumeArgs]) error {
	return w.consume(ctx, j.Args.ID, j.Args.Org)
}

func consumeTx(ctx context.Context, pool *pgxpool.Pool, id, org uuid.UUID) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		now := time.Now().UnixMilli()
		var got uuid.UUID
		err := tx.QueryRow(ctx, `
			INSERT INTO billing_receipts (event_id, created_at) VALUES ($1, $2)
			ON CONFLICT DO NOTHING
			RETURNING event_id`, id, now).Scan(&got)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `
			INSERT INTO billing_quota (org_id, active_rules, updated_at) VALUES ($1, $2, $3)
			ON CONFLICT (org_id) DO UPDATE
			SET active_rules = billing_quota.active_rules + EXCLUDED.active_rules,
			    updated_at = EXCLUDED.updated_at`, org, 1, now)
		return err
	})
}

// consumerOf is the consumer transaction River's workers run on bil (nil: no
// consumer).
func consumerOf(bil *db.Billing) consumeFunc {
	switch {
	case bil == nil:
		return func(context.Context, uuid.UUID, uuid.UUID) error { return errors.New("no billing database") }
	case bil.Pool != nil:
		return func(ctx context.Context, id, org uuid.UUID) error { return consumeTx(ctx, bil.Pool, id, org) }
	}
	svc := billing.NewService(bil.Port, sitting.Quiet())
	return func(ctx context.Context, id, org uuid.UUID) error {
		_, err := svc.Apply(ctx, billing.Event{ID: id, Type: billing.RuleActivated, OccurredAt: time.Now().UnixMilli(), Value: billing.Effect{OrgID: org, Delta: 1}}) // RuleActivated's effect
		return err
	}
}

// newRiverClient returns a River client on driver whose default queue runs
// riverMaxWorkers workers, consume being the consumer's transaction.
func newRiverClient[TTx any](driver riverdriver.Driver[TTx], consume consumeFunc, v Variant) (*river.Client[TTx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	river.AddWorker(workers, &consumeWorker{consume: consume})
	return river.NewClient(driver, &river.Config{
		FetchCooldown: v.fetchCooldown,
		Logger:        sitting.Quiet(),
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverMaxWorkers}},
		Workers:       workers,
	})
}

// riverDB is a fresh River database and a client on it.
type riverDB struct {
	q     db.Querier
	start func(context.Context) error
	stop  func(context.Context) error
	// commit inserts jobs in one transaction (InsertTx for one, else
	// InsertManyFastTx in batches, which sends River's insert notification in
	// it), ANALYZE in it when analyzeTable is set, and returns the drain's start.
	commit func(ctx context.Context, jobs []river.JobArgs, analyzeTable string) (time.Time, error)
	// produce is one producer transaction of the latency figure: one job.
	produce func(ctx context.Context, job river.JobArgs) error
	close   func()
}

// riverInserts is riverDB.commit for a client whose transactions commitTx runs.
func riverInserts[TTx any](client *river.Client[TTx], commitTx func(context.Context, string, func(TTx) error) (time.Time, error)) func(context.Context, []river.JobArgs, string) (time.Time, error) {
	return func(ctx context.Context, jobs []river.JobArgs, analyzeTable string) (time.Time, error) {
		return commitTx(ctx, analyzeTable, func(tx TTx) error {
			if len(jobs) == 1 {
				_, err := client.InsertTx(ctx, tx, jobs[0], nil)
				return err
			}
			params := make([]river.InsertManyParams, 0, 5000)
			for i, j := range jobs {
				params = append(params, river.InsertManyParams{Args: j})
				if len(params) == cap(params) || i == len(jobs)-1 {
					if _, err := client.InsertManyFastTx(ctx, tx, params); err != nil {
						return fmt.Errorf("river backlog: %w", err)
					}
					params = params[:0]
				}
			}
			return nil
		})
	}
}

// newRiverDB makes a River database (with the latency stamp on river_job when
// stamp is set) and a client v on it whose workers consume into bil.
func newRiverDB(ctx context.Context, s *sitting.Sitting, v Variant, bil *db.Billing, stamp bool) (*riverDB, error) {
	if s.Opt.SQLite {
		return newLiteRiverDB(ctx, s, v, bil, stamp)
	}
	setup := db.StampIf(stamp, false, "river_job")
	url, pool, closeDB, err := db.PGCreate(ctx, s, sitting.SchemaRiver, setup)
	if err != nil {
		return nil, err
	}
	// The latency figure's producers: one connection per sender, as the
	// project's producers get.
	prodCfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		closeDB()
		return nil, err
	}
	prodCfg.MaxConns = latency.Senders
	prodPool, err := pgxpool.NewWithConfig(ctx, prodCfg)
	if err != nil {
		closeDB()
		return nil, err
	}
	client, err := newRiverClient(riverpgxv5.New(pool), consumerOf(bil), v)
	if err != nil {
		prodPool.Close()
		closeDB()
		return nil, err
	}
	return &riverDB{
		q: db.PG{Pool: pool}, start: client.Start, stop: client.Stop,
		commit: riverInserts(client, func(ctx context.Context, table string, fill func(pgx.Tx) error) (time.Time, error) {
			return db.CommitBacklog(ctx, pool, table, fill)
		}),
		produce: func(ctx context.Context, job river.JobArgs) error {
			return pgx.BeginFunc(ctx, prodPool, func(tx pgx.Tx) error {
				_, err := client.InsertTx(ctx, tx, job, nil)
				return err
			})
		},
		close: func() { prodPool.Close(); closeDB() },
	}, nil
}

// newLiteRiverDB is newRiverDB on a SQLite file: River on its one connection
// (sitting.OpenRiverDB), its producers too.
func newLiteRiverDB(ctx context.Context, s *sitting.Sitting, v Variant, bil *db.Billing, stamp bool) (*riverDB, error) {
	setup := db.StampIf(stamp, true, "river_job")
	_, d, q, closeFile, err := db.LiteCreate(ctx, s.Files, sitting.SchemaRiver, setup, func(path string) (*sql.DB, error) {
		return sitting.OpenRiverDB(path, s.LiteBounds)
	})
	if err != nil {
		return nil, err
	}
	client, err := newRiverClient(riversqlite.New(d), consumerOf(bil), v)
	if err != nil {
		closeFile()
		return nil, err
	}
	commit := riverInserts(client, func(ctx context.Context, table string, fill func(*sql.Tx) error) (time.Time, error) {
		return db.LiteCommit(ctx, d, table, fill)
	})
	return &riverDB{
		q: q, start: client.Start, stop: client.Stop, commit: commit,
		produce: func(ctx context.Context, job river.JobArgs) error {
			_, err := commit(ctx, []river.JobArgs{job}, "")
			return err
		},
		close: closeFile,
	}, nil
}

// stopRiver stops a River client within 30s, even once ctx has ended.
func stopRiver(ctx context.Context, r *riverDB) error {
	stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return r.stop(stopCtx)
}

// Drain measures jobs/s of one River client draining n jobs: no-op jobs, or
// (consume) the consumer transaction on a fresh billing database, timed as
// package drain says: the client started on an empty table, the jobs
// committed in one transaction (InsertManyFastTx, which sends River's insert
// notification in it), the clock from that commit to the last job's
// finalized_at, or to the last receipt for consume.
func Drain(ctx context.Context, s *sitting.Sitting, v Variant, n int, analyzed, consume bool) (float64, error) {
	var bil *db.Billing
	if consume {
		var err error
		if bil, err = db.NewBilling(ctx, s, false); err != nil {
			return 0, err
		}
		defer bil.Close()
	}
	r, err := newRiverDB(ctx, s, v, bil, false)
	if err != nil {
		return 0, err
	}
	defer r.close()
	if err := r.start(ctx); err != nil {
		return 0, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = stopRiver(ctx, r) // an error path: the database is dropped anyway
		}
	}()
	pr := drain.ProbesOf(s)
	endDB, endSQL := r.q, pr.RiverEnd
	if consume {
		endDB, endSQL = bil.Q, pr.ReceiptsEnd
	}
	job := func(i int) river.JobArgs {
		if consume {
			return consumeArgs{ID: uuid.New(), Org: db.OrgID(i % db.Orgs)}
		}
		return noopArgs{}
	}
	if _, err := drain.WarmUp(ctx, func() (time.Time, error) {
		return r.commit(ctx, []river.JobArgs{job(0)}, "")
	}, drain.NoRow(ctx, r.q, pr.RiverPending), drain.StampOf(ctx, endDB, endSQL)); err != nil {
		return 0, err
	}
	jobs := make([]river.JobArgs, n)
	for i := range jobs {
		jobs[i] = job(i)
	}
	start, err := r.commit(ctx, jobs, db.AnalyzedTable(analyzed, "river_job"))
	if err != nil {
		return 0, err
	}
	probe := drain.Probe{Q: r.q, Probe: pr.RiverPending, From: pr.RiverPendingFrom, CountLeft: pr.RiverPendingCount, EndDB: endDB, EndSQL: endSQL}
	end, left, err := probe.Wait(ctx, n, s.Opt.DrainLimit)
	rate, err := drain.Rate(s, fmt.Sprintf("%s drain of %d", v.Name, n), n, start, end, left, err)
	if err != nil {
		return 0, err
	}
	stopped = true
	if err := stopRiver(ctx, r); err != nil {
		return 0, err
	}
	return rate, nil
}

// Latency is a River client v at rate: the producer inserting one job per
// transaction (InsertTx), the worker running the consumer transaction.
func Latency(ctx context.Context, s *sitting.Sitting, v Variant, rate int) (latency.Outcome, error) {
	bil, err := db.NewBilling(ctx, s, true)
	if err != nil {
		return latency.Outcome{}, err
	}
	defer bil.Close()
	r, err := newRiverDB(ctx, s, v, bil, true)
	if err != nil {
		return latency.Outcome{}, err
	}
	defer r.close()
	if err := r.start(ctx); err != nil {
		return latency.Outcome{}, err
	}
	defer stopRiver(ctx, r) //nolint:errcheck
	return latency.Measure(ctx, r.q, bil.Q, s.Opt.LatencyGrace, func() (latency.Offered, error) {
		return latency.Offer(ctx, rate, s.Opt.LatencyDuration, latency.Senders, func(ctx context.Context, k int) error {
			return r.produce(ctx, consumeArgs{ID: uuid.New(), Org: db.OrgID(k % db.Orgs)})
		})
	})
}

package main

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

	"github.com/acme/outboxpair/billing"
)

// riverMaxWorkers is the worker count of River's default queue here: the value
// River's own documentation uses.
const riverMaxWorkers = 100

// riverVariant is River at its defaults, or "tuned" with FetchCooldown 1ms.
type riverVariant struct {
	name          string
	fetchCooldown time.Duration // 0: River's default (100ms)
}

var riverVariants = []riverVariant{
	{name: "river", fetchCooldown: 0},
	{name: "river-1ms", fetchCooldown: time.Millisecond},
}

// rivers are the variants this run measures (-river).
func (b *bench) rivers() []riverVariant {
	var vs []riverVariant
	for _, v := range riverVariants {
		if slices.Contains(b.opt.river, v.name) {
			vs = append(vs, v)
		}
	}
	return vs
}

type noopArgs struct{}

func (noopArgs) Kind() string { return "bench_noop" }

type noopWorker struct{ river.WorkerDefaults[noopArgs] }

func (noopWorker) Work(context.Context, *river.Job[noopArgs]) error { return nil }

// consumeArgs carries what the consumer needs: the event id (the receipt's key)
// and the org.
type consumeArgs struct {
	ID  uuid.UUID `json:"id"`
	Org uuid.UUID `json:"org"`
}

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
func consumerOf(bil *billingDB) consumeFunc {
	switch {
	case bil == nil:
		return func(context.Context, uuid.UUID, uuid.UUID) error { return errors.New("no billing database") }
	case bil.pool != nil:
		return func(ctx context.Context, id, org uuid.UUID) error { return consumeTx(ctx, bil.pool, id, org) }
	}
	svc := billing.NewService(bil.port, quiet())
	return func(ctx context.Context, id, org uuid.UUID) error {
		_, err := svc.Apply(ctx, billing.Event{ID: id, Type: billing.RuleActivated, OccurredAt: time.Now().UnixMilli(), Value: billing.Effect{OrgID: org, Delta: 1}}) // RuleActivated's effect
		return err
	}
}

// newRiverClient returns a River client on driver whose default queue runs
// riverMaxWorkers workers, consume being the consumer's transaction.
func newRiverClient[TTx any](driver riverdriver.Driver[TTx], consume consumeFunc, v riverVariant) (*river.Client[TTx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	river.AddWorker(workers, &consumeWorker{consume: consume})
	return river.NewClient(driver, &river.Config{
		FetchCooldown: v.fetchCooldown,
		Logger:        quiet(),
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverMaxWorkers}},
		Workers:       workers,
	})
}

// riverDB is a fresh River database and a client on it.
type riverDB struct {
	q     db
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
func (b *bench) newRiverDB(ctx context.Context, v riverVariant, bil *billingDB, stamp bool) (*riverDB, error) {
	if b.opt.sqlite {
		return b.newLiteRiverDB(ctx, v, bil, stamp)
	}
	setup := stampIf(stamp, false, "river_job")
	url, pool, closeDB, err := b.pgCreate(ctx, schemaRiver, setup)
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
	prodCfg.MaxConns = latencySenders
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
		q: pgDB{pool}, start: client.Start, stop: client.Stop,
		commit: riverInserts(client, func(ctx context.Context, table string, fill func(pgx.Tx) error) (time.Time, error) {
			return commitBacklog(ctx, pool, table, fill)
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
// (openRiverDB), its producers too.
func (b *bench) newLiteRiverDB(ctx context.Context, v riverVariant, bil *billingDB, stamp bool) (*riverDB, error) {
	setup := stampIf(stamp, true, "river_job")
	_, d, q, closeFile, err := liteCreate(ctx, b.files, schemaRiver, setup, func(path string) (*sql.DB, error) {
		return openRiverDB(path, b.liteBounds)
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
		return liteCommit(ctx, d, table, fill)
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

// riverDrain measures jobs/s of one River client draining n jobs: no-op jobs,
// or (consume) the consumer transaction on a fresh billing database, timed as
// drain.go says: the client started on an empty table, the jobs committed in
// one transaction (InsertManyFastTx, which sends River's insert notification
// in it), the clock from that commit to the last job's finalized_at, or to the
// last receipt for consume.
func (b *bench) riverDrain(ctx context.Context, v riverVariant, n int, analyzed, consume bool) (float64, error) {
	var bil *billingDB
	if consume {
		var err error
		if bil, err = b.newBilling(ctx, false); err != nil {
			return 0, err
		}
		defer bil.close()
	}
	r, err := b.newRiverDB(ctx, v, bil, false)
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
	pr := b.probes()
	endDB, endSQL := r.q, pr.riverEnd
	if consume {
		endDB, endSQL = bil.q, pr.receiptsEnd
	}
	job := func(i int) river.JobArgs {
		if consume {
			return consumeArgs{ID: uuid.New(), Org: orgID(i % orgs)}
		}
		return noopArgs{}
	}
	if _, err := warmUp(ctx, func() (time.Time, error) {
		return r.commit(ctx, []river.JobArgs{job(0)}, "")
	}, noRow(ctx, r.q, pr.riverPending), stampOf(ctx, endDB, endSQL)); err != nil {
		return 0, err
	}
	jobs := make([]river.JobArgs, n)
	for i := range jobs {
		jobs[i] = job(i)
	}
	start, err := r.commit(ctx, jobs, analyzedTable(analyzed, "river_job"))
	if err != nil {
		return 0, err
	}
	probe := drainProbe{q: r.q, probe: pr.riverPending, from: pr.riverPendingFrom, countLeft: pr.riverPendingCount, endDB: endDB, endSQL: endSQL}
	end, left, err := probe.wait(ctx, n, b.opt.drainLimit)
	rate, err := b.drainRate(fmt.Sprintf("%s drain of %d", v.name, n), n, start, end, left, err)
	if err != nil {
		return 0, err
	}
	stopped = true
	if err := stopRiver(ctx, r); err != nil {
		return 0, err
	}
	return rate, nil
}

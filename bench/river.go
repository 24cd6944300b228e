package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
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

// consumeWorker runs billing's consumer transaction (receipt insert ON CONFLICT
// DO NOTHING, then the quota upsert only when the receipt is new, in one
// transaction) on the billing database: the same SQL as billing's store.
type consumeWorker struct {
	river.WorkerDefaults[consumeArgs]
	billing *pgxpool.Pool
}

func (w *consumeWorker) Work(ctx context.Context, j *river.Job[consumeArgs]) error {
	return consumeTx(ctx, w.billing, j.Args.ID, j.Args.Org)
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

// newRiver returns a River client over pool (a database migrated for River)
// whose default queue runs riverMaxWorkers workers; billing (may be nil) is the
// consumer's database.
func newRiver(pool, billing *pgxpool.Pool, v riverVariant) (*river.Client[pgx.Tx], error) {
	workers := river.NewWorkers()
	river.AddWorker(workers, noopWorker{})
	river.AddWorker(workers, &consumeWorker{billing: billing})
	return river.NewClient(riverpgxv5.New(pool), &river.Config{
		FetchCooldown: v.fetchCooldown,
		Logger:        quiet(),
		Queues:        map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: riverMaxWorkers}},
		Workers:       workers,
	})
}

// riverDrain measures jobs/s of one River client draining n jobs: no-op jobs,
// or (consume) the consumer transaction on a fresh billing database, timed as
// drain.go says: the client started on an empty table, the jobs committed in
// one transaction (InsertManyFastTx, which sends River's insert notification
// in it), the clock from that commit to the last job's finalized_at, or to the
// last receipt for consume.
func (b *bench) riverDrain(ctx context.Context, v riverVariant, n int, analyzed, consume bool) (float64, error) {
	dbURL, err := b.env.create(ctx, schemaRiver)
	if err != nil {
		return 0, err
	}
	defer b.env.drop(context.WithoutCancel(ctx), dbURL)
	pool, err := open(ctx, dbURL)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	var billingPool *pgxpool.Pool
	if consume {
		billingURL, err := b.env.create(ctx, schemaBilling)
		if err != nil {
			return 0, err
		}
		defer b.env.drop(context.WithoutCancel(ctx), billingURL)
		if billingPool, err = open(ctx, billingURL); err != nil {
			return 0, err
		}
		defer billingPool.Close()
		if err := installReceiptStamp(ctx, billingPool); err != nil {
			return 0, err
		}
	}
	client, err := newRiver(pool, billingPool, v)
	if err != nil {
		return 0, err
	}
	if err := client.Start(ctx); err != nil {
		return 0, err
	}
	stopped := false
	stop := func() error {
		stopped = true
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return client.Stop(stopCtx)
	}
	defer func() {
		if !stopped {
			_ = stop() // an error path: the database is dropped anyway
		}
	}()
	endPool, endSQL := pool, riverEndSQL
	if consume {
		endPool, endSQL = billingPool, receiptsEndSQL
	}
	if _, err := warmUp(ctx, func() (time.Time, error) {
		var args river.JobArgs = noopArgs{}
		if consume {
			args = consumeArgs{ID: uuid.New(), Org: orgID(0)}
		}
		return commitBacklog(ctx, pool, "", func(tx pgx.Tx) error {
			_, err := client.InsertTx(ctx, tx, args, nil)
			return err
		})
	}, noRow(ctx, pool, riverPendingProbe), stampOf(ctx, endPool, endSQL)); err != nil {
		return 0, err
	}
	analyzeTable := ""
	if analyzed {
		analyzeTable = "river_job"
	}
	start, err := commitBacklog(ctx, pool, analyzeTable, func(tx pgx.Tx) error {
		params := make([]river.InsertManyParams, 0, 5000)
		for i := 0; i < n; i++ {
			var args river.JobArgs = noopArgs{}
			if consume {
				args = consumeArgs{ID: uuid.New(), Org: orgID(i % orgs)}
			}
			params = append(params, river.InsertManyParams{Args: args})
			if len(params) == cap(params) || i == n-1 {
				if _, err := client.InsertManyFastTx(ctx, tx, params); err != nil {
					return fmt.Errorf("river backlog: %w", err)
				}
				params = params[:0]
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	probe := drainProbe{pool: pool, probe: riverPendingProbe, countLeft: riverPendingCountSQL, endPool: endPool, endSQL: endSQL}
	end, left, err := probe.wait(ctx, n, b.opt.drainLimit)
	rate, err := b.drainRate(fmt.Sprintf("%s drain of %d", v.name, n), n, start, end, left, err)
	if err != nil {
		return 0, err
	}
	if err := stop(); err != nil {
		return 0, err
	}
	return rate, nil
}

package main

import (
	"context"
	"crypto/md5"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/labeling"
)

// maxProducerTx bounds each producer's transactions besides its duration.
const maxProducerTx = 10_000_000

// rulesPerClient is how many rules each producer (Go or pgbench client) toggles.
const rulesPerClient = 1000

// orgID and ruleID are the ids the SQL side derives with md5('org' || i)::uuid
// and md5('rule' || i)::uuid, so Go and pgbench touch the same rows.
func orgID(i int) uuid.UUID  { return md5UUID("org" + strconv.Itoa(i)) }
func ruleID(i int) uuid.UUID { return md5UUID("rule" + strconv.Itoa(i)) }

func md5UUID(s string) uuid.UUID { return uuid.UUID(md5.Sum([]byte(s))) }

// seedRules inserts clients × rulesPerClient inactive rules, rule r in org r % orgs.
func seedRules(ctx context.Context, pool *pgxpool.Pool, clients int) error {
	_, err := pool.Exec(ctx, `
		INSERT INTO labeling_rules (org_id, id, name, pattern, label, active, created_at, updated_at)
		SELECT md5('org' || (r % $2))::uuid, md5('rule' || r)::uuid, 'bench ' || r, '(?i)invoice', 'finance', false, $3, $3
		FROM generate_series(0, $1::int - 1) AS r`, clients*rulesPerClient, orgs, time.Now().UnixMilli())
	return err
}

// setActiveSQL is labeling's guarded activation (labeling/store.go SetActive).
const setActiveSQL = `
	UPDATE labeling_rules
	SET active = $3, updated_at = GREATEST(updated_at, $4)
	WHERE org_id = $1 AND id = $2 AND active <> $3
	RETURNING org_id, id, name, pattern, label, active, created_at, updated_at`

// activate is one producer transaction: the guarded UPDATE and, when the row
// changed, outbox.Append of the matching event, committed together.
func activate(ctx context.Context, pool *pgxpool.Pool, r int, active bool) (bool, error) {
	changed := false
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		org, id := orgID(r%orgs), ruleID(r)
		rows, _ := tx.Query(ctx, setActiveSQL, org, id, active, time.Now().UnixMilli())
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		changed = true
		var err error
		if active {
			_, err = outbox.Append(ctx, outbox.NewPostgresStore(nil), postgres.TxOf(tx), labeling.RuleActivated{OrgID: org, RuleID: id})
		} else {
			_, err = outbox.Append(ctx, outbox.NewPostgresStore(nil), postgres.TxOf(tx), labeling.RuleDeactivated{OrgID: org, RuleID: id})
		}
		return err
	})
	return changed, err
}

// goProducers runs p goroutines of producer transactions for d (each toggling
// its own rules in turn, as the pgbench script does) and returns appends/s. The
// pool is sized for p connections.
func (b *bench) goProducers(ctx context.Context, dbURL string, p int, d time.Duration) (float64, error) {
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return 0, err
	}
	cfg.MaxConns = int32(max(p, 4))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	var appended atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, p)
	start := time.Now()
	for c := range p {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil && i < maxProducerTx; i++ {
				changed, err := activate(ctx, pool, c*rulesPerClient+i%rulesPerClient, (i/rulesPerClient)%2 == 0)
				if err != nil {
					if ctx.Err() == nil {
						errs[c] = err
					}
					return
				}
				if changed {
					appended.Add(1)
				}
			}
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return float64(appended.Load()) / elapsed.Seconds(), nil
}

// producerCost measures the project's producer transaction and pgbench's copy
// of it at 1 and 16 producers, each on a fresh database.
func (b *bench) producerCost(ctx context.Context) error {
	for _, p := range []int{1, 16} {
		for _, who := range []string{"project", "pgbench"} {
			if err := ctx.Err(); err != nil {
				return err
			}
			dbURL, err := b.env.create(ctx, schemaLabeling)
			if err != nil {
				return err
			}
			err = func() error {
				defer b.env.drop(context.WithoutCancel(ctx), dbURL)
				pool, err := open(ctx, dbURL)
				if err != nil {
					return err
				}
				err = seedRules(ctx, pool, 16)
				pool.Close()
				if err != nil {
					return err
				}
				var v float64
				if who == "project" {
					v, err = b.goProducers(ctx, dbURL, p, b.opt.producerDuration)
				} else {
					v, err = b.pgbench(ctx, dbURL, producerScript, p, b.opt.producerDuration)
				}
				if err != nil {
					return err
				}
				b.res.add("producer/"+strconv.Itoa(p)+"/"+who, v)
				logf("producer %s, %d producer(s): %.0f appends/s", who, p, v)
				return nil
			}()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

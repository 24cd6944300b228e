// Package producer measures the project's producer transaction (labeling's
// guarded activation and outbox.Append, committed together) beside pgbench
// running the same SQL.
package producer

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/bench/internal/db"
	"github.com/acme/outboxpair/bench/internal/pgbench"
	"github.com/acme/outboxpair/bench/internal/report"
	"github.com/acme/outboxpair/bench/internal/sitting"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/labeling"
)

// maxProducerTx bounds each producer's transactions besides its duration.
const maxProducerTx = 10_000_000

// setActiveSQL is labeling's guarded activation (labeling/store.go SetActive).
const setActiveSQL = `
	UPDATE labeling_rules
	SET active = $3, updated_at = GREATEST(updated_at, $4)
	WHERE org_id = $1 AND id = $2 AND active <> $3
	RETURNING org_id, id, name, pattern, label, active, created_at, updated_at`

// Activate is one producer transaction on rule r: the guarded UPDATE and,
// when the row changed (which it reports), outbox.Append of the matching
// event, committed together.
func Activate(ctx context.Context, pool *pgxpool.Pool, r int, active bool) (bool, error) {
	changed := false
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		org, id := db.OrgID(r%db.Orgs), db.RuleID(r)
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
func goProducers(ctx context.Context, dbURL string, p int, d time.Duration) (float64, error) {
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
				changed, err := Activate(ctx, pool, c*db.RulesPerClient+i%db.RulesPerClient, (i/db.RulesPerClient)%2 == 0)
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

// Cost measures the project's producer transaction and pgbench's copy of it
// at 1 and 16 producers, each on a fresh database, into s's results under
// "producer/<producers>/<project|pgbench>".
func Cost(ctx context.Context, s *sitting.Sitting) error {
	for _, p := range []int{1, 16} {
		for _, who := range []string{"project", "pgbench"} {
			if err := ctx.Err(); err != nil {
				return err
			}
			dbURL, err := s.Env.Create(ctx, sitting.SchemaLabeling)
			if err != nil {
				return err
			}
			err = func() error {
				defer s.Env.Drop(context.WithoutCancel(ctx), dbURL)
				pool, err := sitting.Open(ctx, dbURL)
				if err != nil {
					return err
				}
				err = db.SeedRules(ctx, pool, 16)
				pool.Close()
				if err != nil {
					return err
				}
				var v float64
				if who == "project" {
					v, err = goProducers(ctx, dbURL, p, s.Opt.ProducerDuration)
				} else {
					v, err = pgbench.Run(ctx, s, dbURL, pgbench.ProducerScript, p, s.Opt.ProducerDuration)
				}
				if err != nil {
					return err
				}
				s.Res.Add("producer/"+strconv.Itoa(p)+"/"+who, v)
				report.Logf("producer %s, %d producer(s): %.0f appends/s", who, p, v)
				return nil
			}()
			if err != nil {
				return err
			}
		}
	}
	return nil
}

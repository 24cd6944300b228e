// Package claim measures the cost of the relay's claim and settle on a table
// holding -settled settled rows, before VACUUM and after it.
package claim

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/bench/internal/db"
	"github.com/acme/outboxpair/bench/internal/report"
	"github.com/acme/outboxpair/bench/internal/sitting"
	"github.com/acme/outboxpair/infra/outbox"
)

// statementTimer is a pgx tracer that times the statements the relay issues on
// outbox_events, so the claim is timed as the relay sends it without the relay
// exporting it: a statement with SKIP LOCKED is the claim, any other UPDATE of
// outbox_events a settle (or release).
type statementTimer struct {
	mu     sync.Mutex
	claim  []float64 // ms
	settle []float64 // ms
}

type traceStart struct{}

// TraceQueryStart implements pgx.QueryTracer: it notes when the statement began.
func (t *statementTimer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	return context.WithValue(ctx, traceStart{}, traced{sql: d.SQL, at: time.Now()})
}

type traced struct {
	sql string
	at  time.Time
}

// TraceQueryEnd implements pgx.QueryTracer: it times a claim or a settle.
func (t *statementTimer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryEndData) {
	s, ok := ctx.Value(traceStart{}).(traced)
	if !ok || d.Err != nil {
		return
	}
	ms := float64(time.Since(s.at).Microseconds()) / 1000
	sql := strings.ToUpper(s.sql)
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case strings.Contains(sql, "SKIP LOCKED"):
		t.claim = append(t.claim, ms)
	case strings.Contains(sql, "UPDATE OUTBOX_EVENTS"):
		t.settle = append(t.settle, ms)
	}
}

func (t *statementTimer) take() (claim, settle []float64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	claim, settle = t.claim, t.settle
	t.claim, t.settle = nil, nil
	return claim, settle
}

// Cost measures the claim and the settles on a table holding settled rows:
// first without vacuum (every settled row left a dead tuple and a stale entry in
// the pending index; autovacuum is off for the table), then after VACUUM. It
// times RunOnce with a no-op subscriber (median and first batch, per row), and,
// through the pool's tracer, the claim statement and each settle statement as
// the relay issues them, into s's results under "claim/<vacuumed|notvacuumed>/...".
func Cost(ctx context.Context, s *sitting.Sitting) error {
	dbURL, err := s.Env.Create(ctx, sitting.SchemaLabeling)
	if err != nil {
		return err
	}
	defer s.Env.Drop(context.WithoutCancel(ctx), dbURL)
	pool, err := sitting.Open(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `ALTER TABLE outbox_events SET (autovacuum_enabled = false, toast.autovacuum_enabled = false)`); err != nil {
		return err
	}
	report.Logf("claim cost: preparing %d settled rows (insert, then settle in place)", s.Opt.Settled)
	if err := db.Preload(ctx, pool, s.Opt.Settled); err != nil {
		return err
	}
	// Settled the way the relay settles: an UPDATE of each pending row, so the
	// old versions stay behind until a vacuum.
	if _, err := pool.Exec(ctx, `UPDATE outbox_events SET processed_at = created_at, attempts = 1`); err != nil {
		return err
	}
	if err := analyze(ctx, pool, "outbox_events"); err != nil {
		return err
	}
	timer := &statementTimer{}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return err
	}
	cfg.ConnConfig.Tracer = timer
	relayPool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer relayPool.Close()
	relay, err := outbox.NewRelay(outbox.NewPostgresStore(relayPool), s.Relay, sitting.NoopSubs(), sitting.Quiet())
	if err != nil {
		return err
	}
	defer sitting.StopRelay(relay) //nolint:errcheck
	claimSize := s.Relay.ClaimSize
	for _, vacuumed := range []bool{false, true} {
		if vacuumed {
			if _, err := pool.Exec(ctx, `VACUUM outbox_events`); err != nil {
				return err
			}
		}
		rows := s.Opt.ClaimBatches * claimSize
		if err := preloadOutboxAfter(ctx, pool, rows); err != nil {
			return err
		}
		timer.take()
		var times []float64
		claimed := 0
		for i := 0; i < s.Opt.ClaimBatches*2 && claimed < rows; i++ {
			t := time.Now()
			n, err := relay.RunOnce(ctx)
			if err != nil {
				return err
			}
			if n == 0 {
				break
			}
			claimed += n
			times = append(times, float64(time.Since(t).Microseconds())/1000)
		}
		if len(times) == 0 {
			return errors.New("claim cost: RunOnce claimed nothing")
		}
		tag := "notvacuumed"
		if vacuumed {
			tag = "vacuumed"
		}
		claims, settles := timer.take()
		med := report.Median(times)
		s.Res.Add("claim/"+tag+"/batch", med)
		s.Res.Add("claim/"+tag+"/first", times[0])
		s.Res.Add("claim/"+tag+"/row", med*1000/float64(claimed)*float64(len(times)))
		if len(claims) > 0 {
			s.Res.Add("claim/"+tag+"/claimstmt", report.Median(claims))
			s.Res.Add("claim/"+tag+"/claimfirst", claims[0])
		}
		if len(settles) > 0 {
			s.Res.Add("claim/"+tag+"/settlestmt", report.Median(settles))
		}
		report.Logf("claim cost (%s): %d batches of %d rows, median %.2f ms; claim statement median %s ms (%d), settle statement median %s ms (%d)",
			tag, len(times), claimed/len(times), med, report.FormatValue(report.Median(claims)), len(claims), report.FormatValue(report.Median(settles)), len(settles))
	}
	s.Res.Note("claim cost: %d settled rows (then ANALYZE), autovacuum off for outbox_events; a RunOnce batch is claim + no-op dispatch + settles (per row = median batch / mean rows per batch); the claim and settle statements are timed through a pgx tracer on the relay's pool (a statement with SKIP LOCKED is the claim, any other UPDATE of outbox_events a settle); measured once per run", s.Opt.Settled)
	return nil
}

// preloadOutboxAfter inserts n pending rows newer than every row in the table,
// all available now: rows created after the last pass's end can lie ahead of
// the clock, and a row not yet available ended the batches early (a RunOnce
// that claims nothing).
func preloadOutboxAfter(ctx context.Context, pool *pgxpool.Pool, n int) error {
	now := time.Now().UnixMilli()
	_, err := pool.Exec(ctx, `
		INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
		SELECT gen_random_uuid(), 'RuleActivated',
			jsonb_build_object('orgId', md5('org' || (i % $2))::uuid, 'ruleId', gen_random_uuid()),
			t.m + i, least(t.m + i, $4::bigint), 0
		FROM generate_series(1, $1::int) AS i,
			(SELECT greatest(max(created_at), $3::bigint) AS m FROM outbox_events) AS t`, n, db.Orgs, now-int64(n)-1, now)
	if err != nil {
		return fmt.Errorf("preload pending rows: %w", err)
	}
	return nil
}

func analyze(ctx context.Context, pool *pgxpool.Pool, table string) error {
	_, err := pool.Exec(ctx, "ANALYZE "+pgx.Identifier{table}.Sanitize())
	return err
}

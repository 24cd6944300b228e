package db

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/labeling"
)

const (
	// stampReceiptsColumn gives billing_receipts the consumer's commit-side
	// stamp: a default, so billing's own INSERT (which names its columns) fills
	// it in its own transaction, at no extra statement or row.
	stampReceiptsColumn = `ALTER TABLE billing_receipts ADD COLUMN bench_at timestamptz NOT NULL DEFAULT clock_timestamp()`

	// notifyRequeued is the wake-up a requeue sends (infra/outbox admin.go,
	// listen.go) to the relays that LISTEN (Config.Notify, OUTBOX_NOTIFY): its
	// payload, "requeued:" and the lowest created_at made claimable, also
	// drops their scan floor to it. (An append's Nudge sends an empty one.)
	notifyRequeued = `SELECT pg_notify('outbox_events', $1)`
)

// CommitBacklog runs fill in one transaction, then (if analyzeTable is set)
// ANALYZE in it, reads the server's clock_timestamp() and commits. The clock
// reading is the drain's start.
func CommitBacklog(ctx context.Context, pool *pgxpool.Pool, analyzeTable string, fill func(pgx.Tx) error) (time.Time, error) {
	var start time.Time
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := fill(tx); err != nil {
			return err
		}
		if analyzeTable != "" {
			if _, err := tx.Exec(ctx, "ANALYZE "+pgx.Identifier{analyzeTable}.Sanitize()); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&start)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("commit backlog: %w", err)
	}
	return start, nil
}

// AnalyzedTable is the table to ANALYZE in an analyzed drain's backlog
// transaction: none when not analyzed.
func AnalyzedTable(analyzed bool, table string) string {
	if analyzed {
		return table
	}
	return ""
}

// createdAhead is how far after the backlog's transaction began the rows of a
// SQLite backlog (liteFillOutbox) are created. The relay's scan floor rises to
// its clock less 2s on every claim that finds nothing (infra/outbox claim.go),
// and it claims while the backlog is being written: rows stamped at the
// transaction's start would lie below the floor if the transaction took longer
// than that.
const createdAhead = time.Minute

// FillOutbox inserts n pending RuleActivated rows as Append writes them
// (payload {"orgId","ruleId"}), created 1ms apart up to the transaction's
// start, as a backlog that built up while nothing drained it (a consumer that
// was down) is, all available from the transaction's start; then it sends the
// wake-up a requeue sends (delivered at the commit), which names the lowest
// created_at so that a relay whose scan floor rose past it while the
// transaction ran looks there at once.
//
// Choice: not stamped in the future (createdAhead, as on SQLite, which has no
// notification to carry the floor). A relay's floor cannot rise above its
// clock less 2s, so with rows ahead of its clock every claim scanned the
// pending index from the bottom of the backlog, through the dead entries of
// every row already settled: a drain quadratic in the backlog (0.83× the 10k
// rate at 100k), which rows stamped by a producer's clock (at or
// before the commit) never see.
func FillOutbox(ctx context.Context, tx pgx.Tx, n int) error {
	now := time.Now().UnixMilli()
	lowest := now - int64(n)
	for start := 0; start < n; start += 50000 {
		end := min(n, start+50000) - 1
		_, err := tx.Exec(ctx, `
			INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
			SELECT `+uuidV7SQL("$1::bigint + i")+`, 'RuleActivated',
				jsonb_build_object('orgId', md5('org' || (i % $3))::uuid, 'ruleId', gen_random_uuid()),
				$1::bigint + i, $4::bigint, 0
			FROM generate_series($2::int, $5::int) AS i`, lowest, start, Orgs, now, end)
		if err != nil {
			return fmt.Errorf("fill outbox: %w", err)
		}
	}
	_, err := tx.Exec(ctx, notifyRequeued, fmt.Sprintf("requeued:%d", lowest))
	return err
}

// uuidV7SQL is an SQL expression for a UUIDv7 (RFC 9562) of the epoch
// milliseconds ms (an SQL expression): the ids Append gives rows
// (uuid.NewV7), time-ordered, so that a backlog's primary key is written and
// read near its right edge as the relay's is. Random ids (gen_random_uuid)
// spread a million rows' claims and settles over every leaf of the key, a
// working set that outgrows shared_buffers beside the table: a cost of the
// benchmark's ids, not of the relay's.
func uuidV7SQL(ms string) string {
	return `(lpad(to_hex(` + ms + `), 12, '0') || '7' || substr(md5(random()::text), 1, 3)
				|| to_hex(8 + floor(random() * 4)::int) || substr(md5(random()::text), 1, 15))::uuid`
}

// Preload inserts n pending RuleActivated rows into outbox_events, oldest
// first, as Append would write them (payload {"orgId","ruleId"}), in one
// statement per 50k rows.
func Preload(ctx context.Context, pool *pgxpool.Pool, n int) error {
	now := time.Now().UnixMilli()
	for start := 0; start < n; start += 50000 {
		end := min(n, start+50000) - 1
		_, err := pool.Exec(ctx, `
			INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
			SELECT gen_random_uuid(), 'RuleActivated',
				jsonb_build_object('orgId', md5('org' || (i % $3))::uuid, 'ruleId', gen_random_uuid()),
				$1::bigint - $4::bigint + i, $1::bigint - $4::bigint + i, 0
			FROM generate_series($2::int, $5::int) AS i`, now, start, Orgs, n, end)
		if err != nil {
			return fmt.Errorf("preload outbox: %w", err)
		}
	}
	return nil
}

// LiteCommit runs fill in one write transaction on w (BEGIN IMMEDIATE), then
// ANALYZE in it when analyzeTable is set, reads this host's clock and commits.
// The clock reading is the drain's start, as CommitBacklog's on PostgreSQL.
func LiteCommit(ctx context.Context, w *sql.DB, analyzeTable string, fill func(*sql.Tx) error) (time.Time, error) {
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return time.Time{}, fmt.Errorf("commit backlog: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after a commit it does nothing
	if err := fill(tx); err != nil {
		return time.Time{}, fmt.Errorf("commit backlog: %w", err)
	}
	if analyzeTable != "" {
		if _, err := tx.ExecContext(ctx, "ANALYZE "+analyzeTable); err != nil {
			return time.Time{}, err
		}
	}
	start := time.Now()
	if err := tx.Commit(); err != nil {
		return time.Time{}, fmt.Errorf("commit backlog: %w", err)
	}
	return start, nil
}

// liteFillOutbox inserts n pending RuleActivated rows as Append writes them on
// SQLite, created from createdAhead on (see FillOutbox).
func liteFillOutbox(ctx context.Context, tx *sql.Tx, n int) error {
	stmt, err := tx.PrepareContext(ctx, `
		INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
		VALUES (?1, ?2, ?3, ?4, ?5, 0)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	now := time.Now()
	base := now.Add(createdAhead).UnixMilli()
	for i := range n {
		payload, err := json.Marshal(labeling.RuleActivated{OrgID: OrgID(i % Orgs), RuleID: uuid.New()})
		if err != nil {
			return err
		}
		if _, err := stmt.ExecContext(ctx, uuid.NewString(), labeling.TagRuleActivated, string(payload), base+int64(i), now.UnixMilli()); err != nil {
			return fmt.Errorf("fill outbox: %w", err)
		}
	}
	return nil
}

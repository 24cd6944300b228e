package billing

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// Billing's tables and name, fixed by the contract (section 2): its receipts,
// its NATS dead letters, and the prefix of its metrics (billing_events_total, …).
const (
	Name            = "billing"
	ReceiptsTable   = "billing_receipts"
	NATSFailedTable = "billing_nats_failed"
)

// consumer is billing on infra/inbox: its tables, handlers, effect and crash
// points (contract section 6). Its effect is quotaEffect, one Go function on
// both dialects, and on PostgreSQL the one-statement fast path (pgEffect)
// unless simple; nudger, if any, is woken after each commit that appended a
// row. With rows false (no provider to call) the effect appends no
// QuotaChanged row, but still counts each change in the org's version.
func consumer(handlers []EventHandler, nudger outbox.Nudger, rows, simple bool) inbox.Consumer[Effect] {
	effect := inbox.Effect[Effect]{Func: quotaEffect(rows)}
	if !simple {
		effect.Postgres = pgEffect(rows)
	}
	return inbox.Consumer[Effect]{
		Name:       Name,
		Receipts:   ReceiptsTable,
		NATSFailed: NATSFailedTable,
		Handlers:   handlers,
		Effect:     effect,
		Failpoints: inbox.Failpoints{
			BeforeCommit:    failpoint.BillingEventsBeforeCommit,
			AfterCommit:     failpoint.BillingEventsAfterCommit,
			NATSAfterCommit: failpoint.BillingNATSAfterCommit,
		},
		Committed: appended(nudger, rows),
	}
}

// quotaEffect is billing's effect as one Go function of the inbox's
// transaction, on both dialects: the new events' deltas, summed per org,
// added to billing_quota in org id order (so that two concurrent groups lock
// quota rows in one order and never deadlock), each org's version advanced
// by its changing events in the same upsert, under the row's lock; then,
// with rows, a QuotaChanged row per change (quotaChanges, from the counts
// and versions the upserts returned). One round trip per org and per row:
// the simple path, which pgEffect fuses into the inbox's one statement.
func quotaEffect(rows bool) inbox.EffectFunc[Effect] {
	return func(ctx context.Context, tx inbox.Tx, fresh []Event, now time.Time) error {
		ms := now.UnixMilli()
		final, err := upsertQuotas(ctx, tx, fresh, ms)
		if err != nil || !rows {
			return err
		}
		return insertQuotaChanged(ctx, tx, quotaChanges(fresh, final), ms)
	}
}

// upsertQuotas adds fresh's deltas to their orgs' quota rows, in org id
// order, and returns each org's count and version after them.
func upsertQuotas(ctx context.Context, tx inbox.Tx, fresh []Event, now int64) (map[uuid.UUID]orgCount, error) {
	deltas := map[uuid.UUID]int64{}
	changes := map[uuid.UUID]int64{}
	for _, e := range fresh {
		deltas[e.Value.OrgID] += e.Value.Delta
		if changesQuota(e) {
			changes[e.Value.OrgID]++
		}
	}
	orgs := make([]uuid.UUID, 0, len(deltas))
	for org := range deltas {
		orgs = append(orgs, org)
	}
	slices.SortFunc(orgs, func(a, b uuid.UUID) int { return bytes.Compare(a[:], b[:]) })
	final := make(map[uuid.UUID]orgCount, len(orgs))
	for _, org := range orgs {
		var c orgCount
		err := tx.QueryRow(ctx, `
			INSERT INTO billing_quota (org_id, active_rules, updated_at, version) VALUES ($1, $2, $3, $4)
			ON CONFLICT (org_id) DO UPDATE
			SET active_rules = billing_quota.active_rules + excluded.active_rules,
			    version = billing_quota.version + excluded.version,
			    updated_at = excluded.updated_at
			RETURNING active_rules, version`, org, deltas[org], now, changes[org]).Scan(&c.activeRules, &c.version)
		if err != nil {
			return nil, fmt.Errorf("upsert quota: %w", err)
		}
		final[org] = c
	}
	return final, nil
}

// pgQuotaUpsert is effect_1: one upsert per org (ON CONFLICT DO UPDATE may
// not touch a row twice in one statement, so the org's deltas are summed), in
// org id order so that two concurrent groups never deadlock. The aggregate
// consumes every receipt before it emits a quota row, so all receipt locks
// come before any quota lock. The count is not clamped at zero: with no
// ordering guarantee a deactivation may arrive before its activation, and
// only the plain sum converges. version advances by the org's changing events
// (delta <> 0) under the row's lock, in this statement: the order of the
// org's changes as they committed, whichever replica or group made them.
const pgQuotaUpsert = `
		INSERT INTO billing_quota (org_id, active_rules, updated_at, version)
		SELECT org_id, sum(delta)::bigint, $1, count(*) FILTER (WHERE delta <> 0) FROM applied
		GROUP BY org_id ORDER BY org_id
		ON CONFLICT (org_id) DO UPDATE
		SET active_rules = billing_quota.active_rules + EXCLUDED.active_rules,
		    version = billing_quota.version + EXCLUDED.version,
		    updated_at = EXCLUDED.updated_at
		RETURNING org_id, active_rules, version`

// pgQuotaChanged is effect_2: one QuotaChanged row per new event that changed
// a quota (a duplicate is not in applied, so it appends nothing): its id made
// in Go as outbox.Append makes one (outbox_id, a UUIDv7 per event), the
// payload built by jsonb_build_object, the count the org's after this event:
// the count effect_1 returned (the org's after the whole group; the
// statement's CTEs share one snapshot, so RETURNING is the only way to read
// it) less the deltas of the org's later events in the group, in event id
// order, and its version likewise the org's new version less the number of
// the org's later changing events in the group (the WHERE runs before the
// window, so the frame holds only changing events).
const pgQuotaChanged = `
		INSERT INTO ` + OutboxTable + ` (id, event_tag, payload, created_at, available_at, attempts)
		SELECT applied.outbox_id, '` + QuotaChangedTag + `',
		       jsonb_build_object(
		           'orgId', applied.org_id,
		           'activeRules', (effect_1.active_rules - coalesce(sum(applied.delta) OVER later, 0))::bigint,
		           'sourceEventId', applied.event_id,
		           'version', (effect_1.version - count(*) OVER later)::bigint),
		       $1, $1, 0
		FROM applied JOIN effect_1 USING (org_id)
		WHERE applied.delta <> 0
		WINDOW later AS (PARTITION BY applied.org_id ORDER BY applied.event_id
		                 ROWS BETWEEN 1 FOLLOWING AND UNBOUNDED FOLLOWING)
		ORDER BY applied.event_id`

// pgEffect adds the new events' deltas to billing_quota (pgQuotaUpsert) and,
// with rows, appends their QuotaChanged rows to billing_outbox_events
// (pgQuotaChanged), within the inbox's one statement. No NOTIFY in the
// statement: a NOTIFY holds a database-wide lock until its commit
// (infra/outbox/listen.go); the inbox's Committed hook (appended) nudges the
// relay after the commit, as after outbox.Append.
func pgEffect(rows bool) inbox.PostgresEffect[Effect] {
	if !rows {
		return inbox.PostgresEffect[Effect]{
			Columns: []string{"org_id uuid", "delta bigint"},
			Args: func(events []Event) []any {
				orgs, deltas := effects(events)
				return []any{orgs, deltas}
			},
			Statements: []string{pgQuotaUpsert},
		}
	}
	return inbox.PostgresEffect[Effect]{
		Columns: []string{"org_id uuid", "delta bigint", "outbox_id uuid"},
		Args: func(events []Event) []any {
			orgs, deltas := effects(events)
			return []any{orgs, deltas, outboxIDs(events)}
		},
		Statements: []string{pgQuotaUpsert, pgQuotaChanged},
	}
}

// effects are the events' orgs and deltas, as two arrays.
func effects(events []Event) ([]uuid.UUID, []int64) {
	orgs := make([]uuid.UUID, len(events))
	deltas := make([]int64, len(events))
	for i, e := range events {
		orgs[i], deltas[i] = e.Value.OrgID, e.Value.Delta
	}
	return orgs, deltas
}

// quotaReader reads an org's active rules in a read-only transaction.
type quotaReader func(ctx context.Context, org uuid.UUID) (int64, error)

// quotaReaders are the quota read per dialect.
var quotaReaders = database.Dialects[quotaReader]{
	Postgres: func(db *postgres.DB) quotaReader {
		return func(ctx context.Context, org uuid.UUID) (n int64, err error) {
			err = db.InTx(ctx, sqldb.TxOptions{ReadOnly: true}, func(tx postgres.Tx) error {
				err := tx.QueryRow(ctx, `SELECT active_rules FROM billing_quota WHERE org_id = $1`, org).Scan(&n)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				return err
			})
			return n, err
		}
	},
	SQLite: func(db *sqlite.DB) quotaReader {
		return func(ctx context.Context, org uuid.UUID) (n int64, err error) {
			err = db.InTx(ctx, sqldb.TxOptions{ReadOnly: true}, func(tx sqlite.Tx) error {
				err := tx.QueryRow(ctx, `SELECT active_rules FROM billing_quota WHERE org_id = ?1`, org).Scan(&n)
				if errors.Is(err, sql.ErrNoRows) {
					return nil
				}
				return err
			})
			return n, err
		}
	},
}

// readQuota wraps a quota read's error.
func readQuota(read quotaReader) quotaReader {
	return func(ctx context.Context, org uuid.UUID) (int64, error) {
		n, err := read(ctx, org)
		if err != nil {
			return 0, fmt.Errorf("read quota: %w", err)
		}
		return n, nil
	}
}

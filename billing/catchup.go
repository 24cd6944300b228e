package billing

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// CatchUpBatch is how many orgs one catch-up transaction versions.
const CatchUpBatch = 500

// CatchUp tells the provider the count of every org no QuotaChanged row was
// ever appended for: an org whose changes were all applied by a billing
// older than migration 00006 (version 0), whose count the provider would
// otherwise learn only at its next change. In one transaction per batch of
// at most batch orgs, in org id order, it sets each such org's version to 1
// under its quota row's lock, only where it is still 0, and appends one
// QuotaChanged row per org it versioned: version 1, the org's count as it
// stands, and no sourceEventId (no single event made that count). Several
// catch-ups at once (replicas starting together) version each org once: the
// one that takes the row's lock first finds version 0, the others find 1
// and skip it. A change applied meanwhile counts on from the catch-up's
// version, or the catch-up counts on from it (an org it made version 1 or
// more has changed, and has its row). A catch-up stopped mid-way leaves its
// committed batches done and the rest to the next. nudger, if any, is woken
// after each batch that appended rows. It returns how many rows it appended.
func CatchUp(ctx context.Context, db sqldb.DB, batch int, nudger outbox.Nudger) (int, error) {
	run := database.Pick(db, catchUpBatches)
	var after *uuid.UUID
	total := 0
	for {
		changes, err := run(ctx, after, batch, time.Now().UnixMilli())
		if err != nil {
			return total, fmt.Errorf("billing: catch-up of unversioned orgs: %w", err)
		}
		if len(changes) == 0 {
			return total, nil
		}
		total += len(changes)
		outbox.CountAppended(OutboxTable, QuotaChangedTag, len(changes))
		if nudger != nil {
			nudger.Nudge()
		}
		last := changes[len(changes)-1].OrgID
		after = &last
	}
}

// RunCatchUp is CatchUp in the background, logging its count at INFO (or its
// error): started at serve's start, after the migrations, with a provider
// set. The returned stop cancels it and waits for it.
func RunCatchUp(db sqldb.DB, nudger outbox.Nudger, logger *slog.Logger) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		n, err := CatchUp(ctx, db, CatchUpBatch, nudger)
		if err != nil {
			if ctx.Err() == nil {
				logger.Error("catch-up of unversioned orgs failed; what it committed stays, the rest is caught up at the next start",
					"table", OutboxTable, "appended", n, "error", err)
			}
			return
		}
		logger.Info("catch-up of unversioned orgs: one "+QuotaChangedTag+" row (version 1, the org's count) appended for each org never told to the provider",
			"table", OutboxTable, "appended", n)
	})
	return func() { cancel(); wg.Wait() }
}

// catchUpBatch versions at most limit unversioned orgs after the org id
// after (from the first when nil) in one transaction and returns their
// QuotaChanged rows, appended in it, in org id order; none when no
// unversioned org is left after after.
type catchUpBatch func(ctx context.Context, after *uuid.UUID, limit int, now int64) ([]QuotaChanged, error)

// catchUpBatches are the catch-up's batch per dialect. On PostgreSQL the
// rows are locked in org id order (as the apply's upsert takes them, so the
// two never deadlock), and a row another catch-up or an apply versioned
// while this one waited for its lock is re-read, found versioned and
// skipped, its place in the batch taken by the next. On SQLite the
// transaction holds the one write lock.
var catchUpBatches = database.Dialects[catchUpBatch]{
	Postgres: func(db *postgres.DB) catchUpBatch {
		store := outbox.NewPostgresStore(db.Pool, outbox.WithTable(OutboxTable))
		return func(ctx context.Context, after *uuid.UUID, limit int, now int64) (out []QuotaChanged, err error) {
			err = db.InTx(ctx, sqldb.TxOptions{}, func(tx postgres.Tx) error {
				out = nil
				rows, err := tx.Query(ctx, `
					WITH picked AS (
						SELECT org_id FROM billing_quota
						WHERE version = 0 AND ($1::uuid IS NULL OR org_id > $1)
						ORDER BY org_id LIMIT $2 FOR UPDATE)
					UPDATE billing_quota SET version = 1 FROM picked
					WHERE billing_quota.org_id = picked.org_id
					RETURNING billing_quota.org_id, billing_quota.active_rules`, after, limit)
				if err != nil {
					return err
				}
				defer rows.Close()
				if out, err = caughtUp(rows); err != nil {
					return err
				}
				return appendQuotaChanges(ctx, store, tx, out, now)
			})
			return out, err
		}
	},
	SQLite: func(db *sqlite.DB) catchUpBatch {
		store := outbox.NewSQLiteStore(db, outbox.WithTable(OutboxTable))
		return func(ctx context.Context, after *uuid.UUID, limit int, now int64) (out []QuotaChanged, err error) {
			err = db.InTx(ctx, sqldb.TxOptions{}, func(tx sqlite.Tx) error {
				out = nil
				rows, err := tx.Query(ctx, `
					UPDATE billing_quota SET version = 1
					WHERE org_id IN (SELECT org_id FROM billing_quota
					                 WHERE version = 0 AND (?1 IS NULL OR org_id > ?1)
					                 ORDER BY org_id LIMIT ?2)
					RETURNING org_id, active_rules`, after, limit)
				if err != nil {
					return err
				}
				defer rows.Close()
				if out, err = caughtUp(rows); err != nil {
					return err
				}
				return appendQuotaChanges(ctx, store, tx, out, now)
			})
			return out, err
		}
	},
}

// sortByOrg sorts changes by org id, the keyset's order.
func sortByOrg(changes []QuotaChanged) {
	slices.SortFunc(changes, func(a, b QuotaChanged) int { return bytes.Compare(a.OrgID[:], b.OrgID[:]) })
}

// resultRows is what caughtUp reads of either dialect's rows.
type resultRows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// caughtUp reads the (org_id, active_rules) rows a catch-up batch's UPDATE
// returned as their QuotaChanged, version 1, in org id order.
func caughtUp(rows resultRows) ([]QuotaChanged, error) {
	var out []QuotaChanged
	for rows.Next() {
		c := QuotaChanged{Version: 1}
		if err := rows.Scan(&c.OrgID, &c.ActiveRules); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	sortByOrg(out)
	return out, nil
}

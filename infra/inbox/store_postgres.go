package inbox

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
)

// pgStore is the inbox store on PostgreSQL.
type pgStore struct {
	pool *pgxpool.Pool
	t    tables
}

var _ DialectStore[postgres.Tx] = pgStore{}

// querier is the pool or a transaction's executor.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// applySQL is the one statement of a group on PostgreSQL (PostgresEffect):
// the receipts inserted in event id order (a duplicate waits on the other
// transaction's uncommitted receipt), the effect's statements reading only the
// events whose receipt is new. The statement is atomic: every receipt commits
// with its effect or none does, and without an explicit transaction it is one
// round trip and one commit.
func applySQL[V any](t tables, e PostgresEffect[V]) string {
	cols, arrays := []string{"event_id"}, []string{"$2::uuid[]"}
	for i, c := range e.Columns {
		name, typ, _ := strings.Cut(strings.TrimSpace(c), " ")
		cols = append(cols, name)
		arrays = append(arrays, fmt.Sprintf("$%d::%s[]", i+3, strings.TrimSpace(typ)))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `WITH inbox_events AS (
		SELECT * FROM unnest(%s) AS inbox_events (%s)
	), inbox_fresh AS (
		INSERT INTO %s (event_id, created_at)
		SELECT event_id, $1 FROM inbox_events ORDER BY event_id
		ON CONFLICT DO NOTHING
		RETURNING event_id
	), applied AS (
		SELECT inbox_events.* FROM inbox_fresh JOIN inbox_events USING (event_id)
	)`, strings.Join(arrays, ", "), strings.Join(cols, ", "), t.receipts)
	for i, s := range e.Statements {
		fmt.Fprintf(&b, `, effect_%d AS (%s)`, i+1, s)
	}
	b.WriteString(`
	SELECT event_id FROM inbox_fresh`)
	return b.String()
}

// pgApply applies a group in the one statement: on the pool (its own
// transaction) in a normal build, in an explicit transaction when there is a
// point to pass before the commit.
func pgApply[V any](db *postgres.DB, s pgStore, e PostgresEffect[V]) applyFunc[V] {
	q := applySQL(s.t, e)
	return func(ctx context.Context, events []Event[V], now int64, beforeCommit func() error) (map[uuid.UUID]bool, error) {
		ids := make([]uuid.UUID, len(events))
		for i, ev := range events {
			ids[i] = ev.ID
		}
		args := append([]any{now, ids}, e.Args(events)...)
		if beforeCommit == nil {
			return pgRun(ctx, s.pool, q, args)
		}
		var fresh map[uuid.UUID]bool
		err := db.InTx(ctx, sqldb.TxOptions{}, func(tx postgres.Tx) error {
			var err error
			if fresh, err = pgRun(ctx, tx, q, args); err != nil {
				return err
			}
			return beforeCommit()
		})
		return fresh, err
	}
}

// pgFuncApply applies a group with a Go effect (EffectFunc): in one
// transaction, the receipts inserted by one statement in event id order (a
// duplicate waits on the other transaction's uncommitted receipt, and two
// groups lock receipts in one order), then fn with the events whose receipt
// is new, in event id order, then beforeCommit. Two round trips at least
// where the fast path (pgApply) has one.
func pgFuncApply[V any](db *postgres.DB, s pgStore, fn EffectFunc[V]) applyFunc[V] {
	q := `INSERT INTO ` + s.t.receipts + ` (event_id, created_at)
		SELECT event_id, $1 FROM unnest($2::uuid[]) AS inbox_events (event_id) ORDER BY event_id
		ON CONFLICT DO NOTHING
		RETURNING event_id`
	return func(ctx context.Context, events []Event[V], now int64, beforeCommit func() error) (map[uuid.UUID]bool, error) {
		sorted := slices.Clone(events)
		slices.SortFunc(sorted, func(a, b Event[V]) int { return bytes.Compare(a.ID[:], b.ID[:]) })
		ids := make([]uuid.UUID, len(sorted))
		for i, e := range sorted {
			ids[i] = e.ID
		}
		var fresh map[uuid.UUID]bool
		err := db.InTx(ctx, sqldb.TxOptions{}, func(tx postgres.Tx) error {
			var err error
			if fresh, err = pgRun(ctx, tx, q, []any{now, ids}); err != nil {
				return err
			}
			applied := make([]Event[V], 0, len(fresh))
			for _, e := range sorted {
				if fresh[e.ID] {
					applied = append(applied, e)
				}
			}
			if len(applied) > 0 {
				if err := fn(ctx, pgTx{tx}, applied, time.UnixMilli(now)); err != nil {
					return fmt.Errorf("apply events: %w", err)
				}
			}
			if beforeCommit != nil {
				return beforeCommit()
			}
			return nil
		})
		return fresh, err
	}
}

// pgRun runs the apply statement on q and returns the ids whose receipt is new.
func pgRun(ctx context.Context, q querier, sql string, args []any) (map[uuid.UUID]bool, error) {
	rows, err := q.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("apply events: %w", err)
	}
	fresh := map[uuid.UUID]bool{}
	var id uuid.UUID
	_, err = pgx.ForEachRow(rows, []any{&id}, func() error {
		fresh[id] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("apply events: %w", err)
	}
	return fresh, nil
}

// DeleteReceipts deletes a bounded batch of receipts created before before;
// bounded batches keep each delete's locks short.
func (s pgStore) DeleteReceipts(ctx context.Context, before int64, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, fmt.Sprintf(`
		DELETE FROM %[1]s
		WHERE event_id IN (
			SELECT event_id FROM %[1]s WHERE created_at < $1 LIMIT $2)`, s.t.receipts), before, limit)
	if err != nil {
		return 0, fmt.Errorf("delete receipts: %w", err)
	}
	return tag.RowsAffected(), nil
}

// InsertNATSFailed records a terminated message once: a redelivery of it (its
// term was lost) adds nothing, another message at the same sequence of a
// recreated stream (stored at another time) is recorded beside it. The
// table's insert trigger adds it to the tally in the same statement.
func (s pgStore) InsertNATSFailed(ctx context.Context, tx postgres.Tx, f NATSFailed) error {
	_, err := tx.Exec(ctx, fmt.Sprintf(`
		INSERT INTO %s (stream_seq, stored_at, subject, msg_id, payload, reason, deliveries, failed_at, signature, verified)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
		ON CONFLICT (stream_seq, stored_at) DO NOTHING`, s.t.natsFailed),
		int64(f.StreamSeq), f.StoredAt, []byte(f.Subject), []byte(f.MsgID), f.Payload, f.Reason, int64(f.Deliveries), f.FailedAt, sigBytes(f.Signature), f.Verified)
	if err != nil {
		return fmt.Errorf("insert nats failed: %w", err)
	}
	return nil
}

// natsFailedListed are the columns of a record in a listing, in the order
// pgNATSFailed and sqliteNATSFailed read them: no payload, no signature.
// natsFailedColumns are all of them, payload and signature last.
const (
	natsFailedListed  = `id, stream_seq, stored_at, subject, msg_id, reason, deliveries, failed_at, verified`
	natsFailedColumns = natsFailedListed + `, payload, signature`
)

// ListNATSFailed returns every terminated message, in the order recorded.
func (s pgStore) ListNATSFailed(ctx context.Context) ([]NATSFailed, error) {
	return s.records(ctx, "list nats failed", true, `ORDER BY id`)
}

// PageNATSFailed returns a page of records after the id after, without payloads.
func (s pgStore) PageNATSFailed(ctx context.Context, after int64, limit int) ([]NATSFailed, error) {
	return s.records(ctx, "page nats failed", false, `WHERE id > $1 ORDER BY id LIMIT $2`, after, limit)
}

// OldestNATSFailed returns up to limit records after the id after, oldest first.
func (s pgStore) OldestNATSFailed(ctx context.Context, after int64, limit int) ([]NATSFailed, error) {
	return s.records(ctx, "oldest nats failed", true, `WHERE id > $1 ORDER BY id LIMIT $2`, after, limit)
}

// NATSFailedByID returns the records of ids, oldest first.
func (s pgStore) NATSFailedByID(ctx context.Context, ids []int64) ([]NATSFailed, error) {
	return s.records(ctx, "nats failed by id", true, `WHERE id = ANY($1) ORDER BY id`, ids)
}

// OldestUnverifiedNATSFailed reads the unverified records through their
// partial index (its predicate repeated, so the planner may use it).
func (s pgStore) OldestUnverifiedNATSFailed(ctx context.Context, after int64, limit int) ([]NATSFailed, error) {
	return s.records(ctx, "oldest unverified nats failed", true, `WHERE NOT verified AND id > $1 ORDER BY id LIMIT $2`, after, limit)
}

// records selects the records of the table matching where (payloads too
// when full).
func (s pgStore) records(ctx context.Context, what string, full bool, where string, args ...any) ([]NATSFailed, error) {
	cols := natsFailedListed
	if full {
		cols = natsFailedColumns
	}
	rows, err := s.pool.Query(ctx, `SELECT `+cols+` FROM `+s.t.natsFailed+` `+where, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (NATSFailed, error) { return pgNATSFailed(r, full) })
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// pgNATSFailed reads one record, selected as natsFailedColumns (full) or
// natsFailedListed.
func pgNATSFailed(r pgx.CollectableRow, full bool) (NATSFailed, error) {
	var f NATSFailed
	var seq, deliveries int64
	var subject, msgID, sig []byte
	dest := []any{&f.ID, &seq, &f.StoredAt, &subject, &msgID, &f.Reason, &deliveries, &f.FailedAt, &f.Verified}
	if full {
		dest = append(dest, &f.Payload, &sig)
	}
	err := r.Scan(dest...)
	f.StreamSeq, f.Deliveries = uint64(seq), uint64(deliveries)
	f.Subject, f.MsgID, f.Signature = string(subject), string(msgID), sigString(sig)
	return f, err
}

// DeleteNATSFailed deletes the records ids; one already gone is no error.
func (s pgStore) DeleteNATSFailed(ctx context.Context, tx postgres.Tx, ids ...int64) (int64, error) {
	tag, err := tx.Exec(ctx, `DELETE FROM `+s.t.natsFailed+` WHERE id = ANY($1)`, ids)
	if err != nil {
		return 0, fmt.Errorf("delete nats failed: %w", err)
	}
	return tag.RowsAffected(), nil
}

// SetNATSFailedReason replaces the reason of the record id; one gone is no error.
func (s pgStore) SetNATSFailedReason(ctx context.Context, tx postgres.Tx, id int64, reason string) error {
	if _, err := tx.Exec(ctx, `UPDATE `+s.t.natsFailed+` SET reason = $1 WHERE id = $2`, reason, id); err != nil {
		return fmt.Errorf("set nats failed reason: %w", err)
	}
	return nil
}

// MarkNATSFailedVerified marks the records ids verified: they leave the
// partial index of the unverified ones.
func (s pgStore) MarkNATSFailedVerified(ctx context.Context, tx postgres.Tx, ids []int64) error {
	if _, err := tx.Exec(ctx, `UPDATE `+s.t.natsFailed+` SET verified = true WHERE id = ANY($1)`, ids); err != nil {
		return fmt.Errorf("mark nats failed verified: %w", err)
	}
	return nil
}

// NATSFailedSize reads the tally.
func (s pgStore) NATSFailedSize(ctx context.Context) (rows, bytes int64, err error) {
	err = s.pool.QueryRow(ctx, `SELECT records, bytes FROM `+s.t.natsSize).Scan(&rows, &bytes)
	if err != nil {
		return 0, 0, fmt.Errorf("nats failed size: %w", err)
	}
	return rows, bytes, nil
}

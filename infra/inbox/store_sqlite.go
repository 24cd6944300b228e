package inbox

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// sqliteStore is the inbox store on SQLite. A write transaction holds the
// write lock from its start (BEGIN IMMEDIATE), so two groups (two replicas on
// one file) apply one after another: no lock order to keep, and a duplicate
// receipt is always the other's committed one.
type sqliteStore struct {
	db *sqlite.DB
	t  tables
}

var _ DialectStore[sqlite.Tx] = sqliteStore{}

// sqliteApply applies a group in one write transaction: each receipt inserted
// (in event id order), then effect with the events whose receipt is new, then
// beforeCommit.
func sqliteApply[V any](db *sqlite.DB, s sqliteStore, effect func(context.Context, sqlite.Tx, []Event[V], int64) error) applyFunc[V] {
	insert := `INSERT INTO ` + s.t.receipts + ` (event_id, created_at) VALUES (?1, ?2) ON CONFLICT DO NOTHING`
	return func(ctx context.Context, events []Event[V], now int64, beforeCommit func() error) (map[uuid.UUID]bool, error) {
		sorted := slices.Clone(events)
		slices.SortFunc(sorted, func(a, b Event[V]) int { return cmp.Compare(a.ID.String(), b.ID.String()) })
		var fresh map[uuid.UUID]bool
		err := db.InTx(ctx, sqldb.TxOptions{}, func(tx sqlite.Tx) error {
			fresh = make(map[uuid.UUID]bool, len(sorted))
			receipt, err := tx.Prepare(ctx, insert)
			if err != nil {
				return err
			}
			defer receipt.Close()
			applied := make([]Event[V], 0, len(sorted))
			for _, e := range sorted {
				res, err := receipt.Exec(ctx, e.ID, now)
				if err != nil {
					return err
				}
				n, err := res.RowsAffected()
				if err != nil {
					return err
				}
				if n == 1 {
					fresh[e.ID] = true
					applied = append(applied, e)
				}
			}
			if len(applied) > 0 {
				if err := effect(ctx, tx, applied, now); err != nil {
					return err
				}
			}
			if beforeCommit != nil {
				return beforeCommit()
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("apply events: %w", err)
		}
		return fresh, nil
	}
}

// DeleteReceipts deletes a bounded batch through the created_at index.
func (s sqliteStore) DeleteReceipts(ctx context.Context, before int64, limit int) (int64, error) {
	var n int64
	err := s.db.InTx(ctx, sqldb.TxOptions{}, func(tx sqlite.Tx) error {
		res, err := tx.Exec(ctx, fmt.Sprintf(`
			DELETE FROM %[1]s
			WHERE event_id IN (SELECT event_id FROM %[1]s WHERE created_at < ?1 LIMIT ?2)`, s.t.receipts), before, limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("delete receipts: %w", err)
	}
	return n, nil
}

// InsertNATSFailed records f once; payload is a BLOB. The table's insert
// trigger adds it to the tally.
func (s sqliteStore) InsertNATSFailed(ctx context.Context, tx sqlite.Tx, f NATSFailed) error {
	payload := f.Payload
	if payload == nil {
		payload = []byte{} // NOT NULL: an empty body is an empty BLOB
	}
	_, err := tx.Exec(ctx, fmt.Sprintf(`
		INSERT INTO %s (stream_seq, stored_at, subject, msg_id, payload, reason, deliveries, failed_at, signature, verified)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
		ON CONFLICT (stream_seq, stored_at) DO NOTHING`, s.t.natsFailed),
		int64(f.StreamSeq), f.StoredAt, []byte(f.Subject), []byte(f.MsgID), payload, f.Reason, int64(f.Deliveries), f.FailedAt, sigBytes(f.Signature), f.Verified)
	if err != nil {
		return fmt.Errorf("insert nats failed: %w", err)
	}
	return nil
}

// read runs fn in a read-only transaction (on a reader, beside the writer).
func (s sqliteStore) read(ctx context.Context, fn func(sqlite.Tx) error) error {
	return s.db.InTx(ctx, sqldb.TxOptions{ReadOnly: true}, fn)
}

// ListNATSFailed reads the records on a reader.
func (s sqliteStore) ListNATSFailed(ctx context.Context) ([]NATSFailed, error) {
	return s.records(ctx, "list nats failed", true, `ORDER BY id`)
}

// PageNATSFailed returns a page of records after the id after, without payloads.
func (s sqliteStore) PageNATSFailed(ctx context.Context, after int64, limit int) ([]NATSFailed, error) {
	return s.records(ctx, "page nats failed", false, `WHERE id > ?1 ORDER BY id LIMIT ?2`, after, limit)
}

// OldestNATSFailed returns up to limit records after the id after, oldest first.
func (s sqliteStore) OldestNATSFailed(ctx context.Context, after int64, limit int) ([]NATSFailed, error) {
	return s.records(ctx, "oldest nats failed", true, `WHERE id > ?1 ORDER BY id LIMIT ?2`, after, limit)
}

// NATSFailedByID returns the records of ids, oldest first (ids as a JSON
// array: SQLite has no array parameter).
func (s sqliteStore) NATSFailedByID(ctx context.Context, ids []int64) ([]NATSFailed, error) {
	return s.records(ctx, "nats failed by id", true, `WHERE id IN (SELECT value FROM json_each(?1)) ORDER BY id`, jsonIDs(ids))
}

// OldestUnverifiedNATSFailed reads the unverified records through their
// partial index (its predicate repeated, so the planner may use it).
func (s sqliteStore) OldestUnverifiedNATSFailed(ctx context.Context, after int64, limit int) ([]NATSFailed, error) {
	return s.records(ctx, "oldest unverified nats failed", true, `WHERE NOT verified AND id > ?1 ORDER BY id LIMIT ?2`, after, limit)
}

// records selects, on a reader, the records matching where (payloads too
// when full).
func (s sqliteStore) records(ctx context.Context, what string, full bool, where string, args ...any) ([]NATSFailed, error) {
	cols := natsFailedListed
	if full {
		cols = natsFailedColumns
	}
	var out []NATSFailed
	err := s.read(ctx, func(tx sqlite.Tx) error {
		rows, err := tx.Query(ctx, `SELECT `+cols+` FROM `+s.t.natsFailed+` `+where, args...)
		if err != nil {
			return err
		}
		out, err = sqliteNATSFailed(rows, full)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return out, nil
}

// sqliteNATSFailed reads records selected as natsFailedColumns (full) or
// natsFailedListed, and closes rows.
func sqliteNATSFailed(rows *sql.Rows, full bool) ([]NATSFailed, error) {
	defer rows.Close()
	var out []NATSFailed
	for rows.Next() {
		var f NATSFailed
		var seq, deliveries int64
		var subject, msgID []byte
		var sig sql.Null[[]byte] // an empty BLOB reads as nil: Valid tells it from NULL
		dest := []any{&f.ID, &seq, &f.StoredAt, &subject, &msgID, &f.Reason, &deliveries, &f.FailedAt, &f.Verified}
		if full {
			dest = append(dest, &f.Payload, &sig)
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, err
		}
		f.StreamSeq, f.Deliveries = uint64(seq), uint64(deliveries)
		f.Subject, f.MsgID = string(subject), string(msgID)
		if sig.Valid {
			v := string(sig.V)
			f.Signature = &v
		}
		out = append(out, f)
	}
	return out, rows.Err()
}

// jsonIDs is ids as a JSON array, for json_each.
func jsonIDs(ids []int64) string {
	if len(ids) == 0 {
		return "[]" // not null, which json_each reads as one NULL
	}
	b, _ := json.Marshal(ids) // []int64 always marshals
	return string(b)
}

// DeleteNATSFailed deletes the records ids; one already gone is no error.
func (s sqliteStore) DeleteNATSFailed(ctx context.Context, tx sqlite.Tx, ids ...int64) (int64, error) {
	res, err := tx.Exec(ctx, `DELETE FROM `+s.t.natsFailed+` WHERE id IN (SELECT value FROM json_each(?1))`, jsonIDs(ids))
	if err != nil {
		return 0, fmt.Errorf("delete nats failed: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("delete nats failed: %w", err)
	}
	return n, nil
}

// SetNATSFailedReason replaces the reason of the record id; one gone is no error.
func (s sqliteStore) SetNATSFailedReason(ctx context.Context, tx sqlite.Tx, id int64, reason string) error {
	if _, err := tx.Exec(ctx, `UPDATE `+s.t.natsFailed+` SET reason = ?1 WHERE id = ?2`, reason, id); err != nil {
		return fmt.Errorf("set nats failed reason: %w", err)
	}
	return nil
}

// MarkNATSFailedVerified marks the records ids verified.
func (s sqliteStore) MarkNATSFailedVerified(ctx context.Context, tx sqlite.Tx, ids []int64) error {
	if _, err := tx.Exec(ctx, `UPDATE `+s.t.natsFailed+` SET verified = 1 WHERE id IN (SELECT value FROM json_each(?1))`, jsonIDs(ids)); err != nil {
		return fmt.Errorf("mark nats failed verified: %w", err)
	}
	return nil
}

// NATSFailedSize reads the tally.
func (s sqliteStore) NATSFailedSize(ctx context.Context) (rows, bytes int64, err error) {
	err = s.read(ctx, func(tx sqlite.Tx) error {
		return tx.QueryRow(ctx, `SELECT records, bytes FROM `+s.t.natsSize).Scan(&rows, &bytes)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("nats failed size: %w", err)
	}
	return rows, bytes, nil
}

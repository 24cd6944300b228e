package billing

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// sqliteStore is Store on SQLite. A write transaction holds the write lock
// from its start (BEGIN IMMEDIATE), so two groups (two replicas on one file)
// apply one after another: no lock order to keep, and a duplicate receipt is
// always the other's committed one.
type sqliteStore struct{ db *sqlite.DB }

var _ DialectStore[sqlite.Tx] = sqliteStore{}

// NewSQLiteStore returns the billing store of a SQLite database (its own
// transactions run on it).
func NewSQLiteStore(db *sqlite.DB) DialectStore[sqlite.Tx] { return sqliteStore{db: db} }

// Apply inserts each receipt (in event id order) and adds the deltas of the
// new ones, summed per org, to billing_quota (in org id order), all in tx. The
// count is not clamped: only the plain sum converges without an order.
func (sqliteStore) Apply(ctx context.Context, tx sqlite.Tx, events []Event, now int64) (map[uuid.UUID]bool, error) {
	fresh, err := sqliteApply(ctx, tx, events, now)
	if err != nil {
		return nil, fmt.Errorf("apply events: %w", err)
	}
	return fresh, nil
}

// ApplyOwn is Apply in a write transaction of its own.
func (s sqliteStore) ApplyOwn(ctx context.Context, events []Event, now int64) (map[uuid.UUID]bool, error) {
	var fresh map[uuid.UUID]bool
	err := s.db.InTx(ctx, sqldb.TxOptions{}, func(tx sqlite.Tx) error {
		var err error
		fresh, err = sqliteApply(ctx, tx, events, now)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("apply events: %w", err)
	}
	return fresh, nil
}

func sqliteApply(ctx context.Context, tx sqlite.Tx, events []Event, now int64) (map[uuid.UUID]bool, error) {
	sorted := slices.Clone(events)
	slices.SortFunc(sorted, func(a, b Event) int { return cmp.Compare(a.ID.String(), b.ID.String()) })
	receipt, err := tx.Prepare(ctx, `
		INSERT INTO billing_receipts (event_id, created_at) VALUES (?1, ?2)
		ON CONFLICT DO NOTHING`)
	if err != nil {
		return nil, err
	}
	defer receipt.Close()
	fresh := make(map[uuid.UUID]bool, len(events))
	deltas := map[uuid.UUID]int64{}
	for _, e := range sorted {
		res, err := receipt.Exec(ctx, e.ID, now)
		if err != nil {
			return nil, err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return nil, err
		}
		if n == 1 {
			fresh[e.ID] = true
			deltas[e.OrgID] += e.Delta
		}
	}
	orgs := make([]uuid.UUID, 0, len(deltas))
	for org := range deltas {
		orgs = append(orgs, org)
	}
	slices.SortFunc(orgs, func(a, b uuid.UUID) int { return cmp.Compare(a.String(), b.String()) })
	for _, org := range orgs {
		_, err := tx.Exec(ctx, `
			INSERT INTO billing_quota (org_id, active_rules, updated_at) VALUES (?1, ?2, ?3)
			ON CONFLICT (org_id) DO UPDATE
			SET active_rules = billing_quota.active_rules + excluded.active_rules,
			    updated_at = excluded.updated_at`, org, deltas[org], now)
		if err != nil {
			return nil, err
		}
	}
	return fresh, nil
}

// ActiveRules reads org's count in tx.
func (sqliteStore) ActiveRules(ctx context.Context, tx sqlite.Tx, org uuid.UUID) (int64, error) {
	var n int64
	err := tx.QueryRow(ctx, `SELECT active_rules FROM billing_quota WHERE org_id = ?1`, org).Scan(&n)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read quota: %w", err)
	}
	return n, nil
}

// DeleteReceipts deletes a bounded batch through billing_receipts_created_at_idx.
func (s sqliteStore) DeleteReceipts(ctx context.Context, before int64, limit int) (int64, error) {
	var n int64
	err := s.db.InTx(ctx, sqldb.TxOptions{}, func(tx sqlite.Tx) error {
		res, err := tx.Exec(ctx, `
			DELETE FROM billing_receipts
			WHERE event_id IN (SELECT event_id FROM billing_receipts WHERE created_at < ?1 LIMIT ?2)`, before, limit)
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

// InsertNATSFailed records f once; payload is a BLOB.
func (sqliteStore) InsertNATSFailed(ctx context.Context, tx sqlite.Tx, f NATSFailed) error {
	payload := f.Payload
	if payload == nil {
		payload = []byte{} // NOT NULL: an empty body is an empty BLOB
	}
	_, err := tx.Exec(ctx, `
		INSERT INTO billing_nats_failed (stream_seq, stored_at, subject, msg_id, payload, reason, deliveries, failed_at, signature)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
		ON CONFLICT (stream_seq, stored_at) DO NOTHING`,
		int64(f.StreamSeq), f.StoredAt, []byte(f.Subject), []byte(f.MsgID), payload, f.Reason, int64(f.Deliveries), f.FailedAt, sigBytes(f.Signature))
	if err != nil {
		return fmt.Errorf("insert nats failed: %w", err)
	}
	return nil
}

// read runs fn in a read-only transaction (on a reader, beside the writer),
// whose executor bounds its statements as every transaction's does.
func (s sqliteStore) read(ctx context.Context, fn func(sqlite.Tx) error) error {
	return s.db.InTx(ctx, sqldb.TxOptions{ReadOnly: true}, fn)
}

// ListNATSFailed reads billing_nats_failed on a reader.
func (s sqliteStore) ListNATSFailed(ctx context.Context) ([]NATSFailed, error) {
	var out []NATSFailed
	err := s.read(ctx, func(tx sqlite.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT id, stream_seq, stored_at, subject, msg_id, payload, reason, deliveries, failed_at, signature
			FROM billing_nats_failed ORDER BY id`)
		if err != nil {
			return err
		}
		out, err = sqliteNATSFailed(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list nats failed: %w", err)
	}
	return out, nil
}

// sqliteNATSFailed reads billing_nats_failed rows, selected in the column
// order of ListNATSFailed, and closes rows.
func sqliteNATSFailed(rows *sql.Rows) ([]NATSFailed, error) {
	defer rows.Close()
	var out []NATSFailed
	for rows.Next() {
		var f NATSFailed
		var seq, deliveries int64
		var subject, msgID []byte
		var sig sql.Null[[]byte] // an empty BLOB reads as nil: Valid tells it from NULL
		if err := rows.Scan(&f.ID, &seq, &f.StoredAt, &subject, &msgID, &f.Payload, &f.Reason, &deliveries, &f.FailedAt, &sig); err != nil {
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

// DeleteNATSFailed deletes the record id; one already gone is no error.
func (sqliteStore) DeleteNATSFailed(ctx context.Context, tx sqlite.Tx, id int64) error {
	if _, err := tx.Exec(ctx, `DELETE FROM billing_nats_failed WHERE id = ?1`, id); err != nil {
		return fmt.Errorf("delete nats failed: %w", err)
	}
	return nil
}

// SetNATSFailedReason replaces the reason of the record id; one gone is no error.
func (sqliteStore) SetNATSFailedReason(ctx context.Context, tx sqlite.Tx, id int64, reason string) error {
	if _, err := tx.Exec(ctx, `UPDATE billing_nats_failed SET reason = ?1 WHERE id = ?2`, reason, id); err != nil {
		return fmt.Errorf("set nats failed reason: %w", err)
	}
	return nil
}

// NATSFailedSize counts the records and their payload bytes.
func (s sqliteStore) NATSFailedSize(ctx context.Context) (rows, bytes int64, err error) {
	err = s.read(ctx, func(tx sqlite.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*), coalesce(sum(length(payload)), 0) FROM billing_nats_failed`).Scan(&rows, &bytes)
	})
	if err != nil {
		return 0, 0, fmt.Errorf("nats failed size: %w", err)
	}
	return rows, bytes, nil
}

// OldestNATSFailed returns up to limit records after the id after, oldest first.
func (s sqliteStore) OldestNATSFailed(ctx context.Context, after int64, limit int) ([]NATSFailed, error) {
	var out []NATSFailed
	err := s.read(ctx, func(tx sqlite.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT id, stream_seq, stored_at, subject, msg_id, payload, reason, deliveries, failed_at, signature
			FROM billing_nats_failed WHERE id > ?1 ORDER BY id LIMIT ?2`, after, limit)
		if err != nil {
			return err
		}
		out, err = sqliteNATSFailed(rows)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("oldest nats failed: %w", err)
	}
	return out, nil
}

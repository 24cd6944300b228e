package billing

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/postgres"
)

// pgStore is the store on PostgreSQL.
type pgStore struct{ pool *pgxpool.Pool }

var _ DialectStore[postgres.Tx] = pgStore{}

// NewPostgresStore returns the billing store of a PostgreSQL pool (its own
// transactions run on it).
func NewPostgresStore(pool *pgxpool.Pool) DialectStore[postgres.Tx] { return pgStore{pool: pool} }

// applySQL applies a group of events in ONE statement (so, without an explicit
// transaction, in one round trip and one commit). Each event's receipt is
// inserted unless it exists, and only the events whose receipt is new add their
// delta to their org's active rules, so an event whose receipt exists changes
// nothing. The statement is atomic: every receipt commits with its change or
// none does.
//
// Lock order is what keeps two concurrent groups (two replicas, or a group and
// a lone delivery) from deadlocking: receipts are inserted in event id order
// (a duplicate waits on the other transaction's uncommitted receipt) and quota
// rows are changed in org id order, one upsert per org (ON CONFLICT DO UPDATE may
// not touch a row twice in one statement, so the org's deltas are summed). The
// aggregate consumes every receipt before it emits a quota row, so all receipt
// locks come before any quota lock. The count is not clamped at zero: with no
// ordering guarantee a deactivation may arrive before its activation, and only
// the plain sum converges.
const applySQL = `
	WITH ev AS (
		SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::bigint[]) AS ev (event_id, org_id, delta)
	), fresh AS (
		INSERT INTO billing_receipts (event_id, created_at)
		SELECT event_id, $4 FROM ev ORDER BY event_id
		ON CONFLICT DO NOTHING
		RETURNING event_id
	), quota AS (
		INSERT INTO billing_quota (org_id, active_rules, updated_at)
		SELECT ev.org_id, sum(ev.delta)::bigint, $4 FROM fresh JOIN ev USING (event_id)
		GROUP BY ev.org_id ORDER BY ev.org_id
		ON CONFLICT (org_id) DO UPDATE
		SET active_rules = billing_quota.active_rules + EXCLUDED.active_rules,
		    updated_at = EXCLUDED.updated_at
	)
	SELECT event_id FROM fresh`

// Apply applies events (distinct ids) in one statement in tx and returns the ids
// whose receipt is new, the events it applied; the others were applied before
// and changed nothing. A concurrent insert of the same id waits for the other
// transaction: if that one commits, this one sees the conflict and leaves the
// event out. The receipt and the change are one statement, so a receipt can never
// be claimed apart from its effect (which would turn a crash into a lost event).
func (pgStore) Apply(ctx context.Context, tx postgres.Tx, events []Event, now int64) (map[uuid.UUID]bool, error) {
	return pgApply(ctx, tx, events, now)
}

// ApplyOwn runs Apply's one statement on the pool: a transaction of its own.
func (s pgStore) ApplyOwn(ctx context.Context, events []Event, now int64) (map[uuid.UUID]bool, error) {
	return pgApply(ctx, s.pool, events, now)
}

// pgApply runs applySQL on q, the pool or a transaction.
func pgApply(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, events []Event, now int64) (map[uuid.UUID]bool, error) {
	ids := make([]uuid.UUID, len(events))
	orgs := make([]uuid.UUID, len(events))
	deltas := make([]int64, len(events))
	for i, e := range events {
		ids[i], orgs[i], deltas[i] = e.ID, e.OrgID, e.Delta
	}
	rows, err := q.Query(ctx, applySQL, ids, orgs, deltas, now)
	if err != nil {
		return nil, fmt.Errorf("apply events: %w", err)
	}
	fresh := make(map[uuid.UUID]bool, len(events))
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

// ActiveRules returns org's active rules, 0 for an org no event has touched.
func (pgStore) ActiveRules(ctx context.Context, tx postgres.Tx, org uuid.UUID) (int64, error) {
	var n int64
	err := tx.QueryRow(ctx, `SELECT active_rules FROM billing_quota WHERE org_id = $1`, org).Scan(&n)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read quota: %w", err)
	}
	return n, nil
}

// DeleteReceipts deletes at most limit receipts created before before (epoch ms)
// and returns how many it deleted. It is the retention of billing_receipts: a
// receipt must outlive any window in which its event can be redelivered, or the
// redelivery would apply again. Bounded batches keep each delete's locks short.
func (s pgStore) DeleteReceipts(ctx context.Context, before int64, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, `
		DELETE FROM billing_receipts
		WHERE event_id IN (
			SELECT event_id FROM billing_receipts WHERE created_at < $1 LIMIT $2)`, before, limit)
	if err != nil {
		return 0, fmt.Errorf("delete receipts: %w", err)
	}
	return tag.RowsAffected(), nil
}

// InsertNATSFailed records a terminated message once: a redelivery of it (its
// term was lost) adds nothing, another message at the same sequence of a
// recreated stream (stored at another time) is recorded beside it.
func (pgStore) InsertNATSFailed(ctx context.Context, tx postgres.Tx, f NATSFailed) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO billing_nats_failed (stream_seq, stored_at, subject, msg_id, payload, reason, deliveries, failed_at, signature)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
		ON CONFLICT (stream_seq, stored_at) DO NOTHING`,
		int64(f.StreamSeq), f.StoredAt, []byte(f.Subject), []byte(f.MsgID), f.Payload, f.Reason, int64(f.Deliveries), f.FailedAt, sigBytes(f.Signature))
	if err != nil {
		return fmt.Errorf("insert nats failed: %w", err)
	}
	return nil
}

// ListNATSFailed returns every terminated message, in the order recorded.
func (s pgStore) ListNATSFailed(ctx context.Context) ([]NATSFailed, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, stream_seq, stored_at, subject, msg_id, payload, reason, deliveries, failed_at, signature
		FROM billing_nats_failed ORDER BY id`)
	if err != nil {
		return nil, fmt.Errorf("list nats failed: %w", err)
	}
	return pgx.CollectRows(rows, pgNATSFailed)
}

// pgNATSFailed reads one billing_nats_failed row, selected in the column order
// of ListNATSFailed.
func pgNATSFailed(r pgx.CollectableRow) (NATSFailed, error) {
	var f NATSFailed
	var seq, deliveries int64
	var subject, msgID, sig []byte
	err := r.Scan(&f.ID, &seq, &f.StoredAt, &subject, &msgID, &f.Payload, &f.Reason, &deliveries, &f.FailedAt, &sig)
	f.StreamSeq, f.Deliveries = uint64(seq), uint64(deliveries)
	f.Subject, f.MsgID, f.Signature = string(subject), string(msgID), sigString(sig)
	return f, err
}

// DeleteNATSFailed deletes the record id; one already gone is no error.
func (pgStore) DeleteNATSFailed(ctx context.Context, tx postgres.Tx, id int64) error {
	if _, err := tx.Exec(ctx, `DELETE FROM billing_nats_failed WHERE id = $1`, id); err != nil {
		return fmt.Errorf("delete nats failed: %w", err)
	}
	return nil
}

// SetNATSFailedReason replaces the reason of the record id; one gone is no error.
func (pgStore) SetNATSFailedReason(ctx context.Context, tx postgres.Tx, id int64, reason string) error {
	if _, err := tx.Exec(ctx, `UPDATE billing_nats_failed SET reason = $1 WHERE id = $2`, reason, id); err != nil {
		return fmt.Errorf("set nats failed reason: %w", err)
	}
	return nil
}

// NATSFailedSize counts the records and their payload bytes.
func (s pgStore) NATSFailedSize(ctx context.Context) (rows, bytes int64, err error) {
	err = s.pool.QueryRow(ctx, `SELECT count(*), coalesce(sum(length(payload)), 0) FROM billing_nats_failed`).Scan(&rows, &bytes)
	if err != nil {
		return 0, 0, fmt.Errorf("nats failed size: %w", err)
	}
	return rows, bytes, nil
}

// OldestNATSFailed returns up to limit records after the id after, oldest first.
func (s pgStore) OldestNATSFailed(ctx context.Context, after int64, limit int) ([]NATSFailed, error) {
	rows, err := s.pool.Query(ctx, `
		SELECT id, stream_seq, stored_at, subject, msg_id, payload, reason, deliveries, failed_at, signature
		FROM billing_nats_failed WHERE id > $1 ORDER BY id LIMIT $2`, after, limit)
	if err != nil {
		return nil, fmt.Errorf("oldest nats failed: %w", err)
	}
	return pgx.CollectRows(rows, pgNATSFailed)
}

package billing

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Store reads and writes billing_receipts and billing_quota. Its methods run in the
// transaction they are given; the use case owns it.
type Store struct{}

// InsertReceipt records that event id is applied, unless a receipt for it exists.
// It reports whether the receipt is new. A concurrent insert of the same id waits
// for the other transaction: if that one commits, this one sees the conflict and
// reports false. It must run in the same transaction as the event's effect; claimed
// alone, a crash after it would lose the effect forever.
func (Store) InsertReceipt(ctx context.Context, tx pgx.Tx, id uuid.UUID, now int64) (bool, error) {
	var got uuid.UUID
	err := tx.QueryRow(ctx, `
		INSERT INTO billing_receipts (event_id, created_at) VALUES ($1, $2)
		ON CONFLICT DO NOTHING
		RETURNING event_id`, id, now).Scan(&got)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("insert receipt: %w", err)
	}
	return true, nil
}

// AddActiveRules adds delta to org's active rules, creating the org's row at delta.
// The count is not clamped at zero: with no ordering guarantee a deactivation may
// arrive before its activation, and only the plain sum converges.
func (Store) AddActiveRules(ctx context.Context, tx pgx.Tx, org uuid.UUID, delta, now int64) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO billing_quota (org_id, active_rules, updated_at) VALUES ($1, $2, $3)
		ON CONFLICT (org_id) DO UPDATE
		SET active_rules = billing_quota.active_rules + EXCLUDED.active_rules,
		    updated_at = EXCLUDED.updated_at`, org, delta, now)
	if err != nil {
		return fmt.Errorf("add active rules: %w", err)
	}
	return nil
}

// ActiveRules returns org's active rules, 0 for an org no event has touched.
func (Store) ActiveRules(ctx context.Context, tx pgx.Tx, org uuid.UUID) (int64, error) {
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
func (Store) DeleteReceipts(ctx context.Context, pool *pgxpool.Pool, before int64, limit int) (int64, error) {
	tag, err := pool.Exec(ctx, `
		DELETE FROM billing_receipts
		WHERE event_id IN (
			SELECT event_id FROM billing_receipts WHERE created_at < $1 LIMIT $2)`, before, limit)
	if err != nil {
		return 0, fmt.Errorf("delete receipts: %w", err)
	}
	return tag.RowsAffected(), nil
}

package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// FailedRow is a dead-lettered outbox row.
type FailedRow struct {
	ID        uuid.UUID
	Tag       string
	Attempts  int
	FailedAt  int64 // epoch ms
	LastError string
}

// ErrPending is returned by Delete when an id names a pending row; nothing is deleted.
var ErrPending = errors.New("outbox: refusing to delete pending rows")

// Failed lists the dead-lettered rows, oldest failure first.
func Failed(ctx context.Context, pool *pgxpool.Pool) ([]FailedRow, error) {
	rows, err := pool.Query(ctx, `
		SELECT id, event_tag, attempts, failed_at, coalesce(last_error, '')
		FROM outbox_events WHERE failed_at IS NOT NULL
		ORDER BY failed_at, id`)
	if err != nil {
		return nil, fmt.Errorf("outbox: list failed: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (FailedRow, error) {
		var f FailedRow
		err := row.Scan(&f.ID, &f.Tag, &f.Attempts, &f.FailedAt, &f.LastError)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("outbox: list failed: %w", err)
	}
	return out, nil
}

// Requeue makes the failed rows among ids pending again, available now, with
// their attempts reset to 0 and no claim token (so no earlier claim can settle
// them). It returns how many rows it changed. Ids of rows that are pending,
// processed or absent are left alone: requeueing never delivers a processed
// fact again. At its commit every relay that listens (Config.Notify) is told to
// look below its scan floor, where a requeued row lies (its created_at, the
// event's time, is kept), so a running relay claims the rows at once rather
// than at its next sweep.
func Requeue(ctx context.Context, pool *pgxpool.Pool, ids []uuid.UUID) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := requeue(ctx, pool, `id = ANY($2) AND failed_at IS NOT NULL`, ids)
	if err != nil {
		return 0, fmt.Errorf("outbox: requeue: %w", err)
	}
	return n, nil
}

// RequeueAllFailed is Requeue for every failed row.
func RequeueAllFailed(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	n, err := requeue(ctx, pool, `failed_at IS NOT NULL`)
	if err != nil {
		return 0, fmt.Errorf("outbox: requeue all failed: %w", err)
	}
	return n, nil
}

// requeue requeues the rows matching where ($1 is now, args follow) and, in
// the same transaction, notifies the relays of the lowest created_at among
// them (delivered at the commit, never for a rolled-back requeue).
func requeue(ctx context.Context, pool *pgxpool.Pool, where string, args ...any) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var lowest *int64
		err := tx.QueryRow(ctx, `
			WITH u AS (
				UPDATE outbox_events
				SET failed_at = NULL, attempts = 0, available_at = $1, claimed_until = NULL, claim_token = NULL
				WHERE `+where+`
				RETURNING created_at)
			SELECT count(*), min(created_at) FROM u`,
			append([]any{time.Now().UnixMilli()}, args...)...).Scan(&n, &lowest)
		if err != nil || lowest == nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, notifyChannel, requeuedPayload(*lowest))
		return err
	})
	return n, err
}

// Delete deletes the rows named by ids if every one is failed or processed; if any
// is pending it deletes nothing and returns an error wrapping ErrPending that
// names the pending ids. Ids of absent rows are ignored. The check and the delete
// run in one transaction that locks the rows first, so none can be requeued or
// reclaimed between them.
func Delete(ctx context.Context, pool *pgxpool.Pool, ids []uuid.UUID) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	var deleted int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// Lock every named row (in id order, so two deletes cannot deadlock) so
		// that none changes state between the check and the delete.
		rows, err := tx.Query(ctx, `
			SELECT id, processed_at IS NULL AND failed_at IS NULL
			FROM outbox_events WHERE id = ANY($1)
			ORDER BY id
			FOR UPDATE`, ids)
		if err != nil {
			return err
		}
		var pending []string
		var id uuid.UUID
		var isPending bool
		_, err = pgx.ForEachRow(rows, []any{&id, &isPending}, func() error {
			if isPending {
				pending = append(pending, id.String())
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(pending) > 0 {
			return fmt.Errorf("%w: %s", ErrPending, strings.Join(pending, ", "))
		}
		tag, err := tx.Exec(ctx, `
			DELETE FROM outbox_events
			WHERE id = ANY($1) AND (processed_at IS NOT NULL OR failed_at IS NOT NULL)`, ids)
		if err != nil {
			return err
		}
		deleted = tag.RowsAffected()
		return nil
	})
	if err != nil {
		if errors.Is(err, ErrPending) {
			return 0, err
		}
		return 0, fmt.Errorf("outbox: delete: %w", err)
	}
	return deleted, nil
}

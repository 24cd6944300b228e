package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// FailedRow is a dead-lettered outbox row.
type FailedRow struct {
	ID        uuid.UUID
	Tag       string
	Attempts  int
	FailedAt  int64 // epoch ms
	LastError string
	// Subscriber is the one the row was for (DefaultSubscriber ""): a
	// requeue re-delivers the event to it alone.
	Subscriber string
}

// ErrPending is returned by Delete when an id names a pending row; nothing is deleted.
var ErrPending = errors.New("outbox: refusing to delete pending rows")

// Failed lists the dead-lettered rows of store, oldest failure first.
func Failed(ctx context.Context, store Store) ([]FailedRow, error) {
	out, err := store.Failed(ctx)
	if err != nil {
		return nil, fmt.Errorf("outbox: list failed: %w", err)
	}
	return out, nil
}

// Requeue makes the failed rows among ids pending again, available now, with
// their attempts reset to 0 and no claim token (so no earlier claim can settle
// them). It returns how many rows it changed. Ids of rows that are pending,
// processed or absent are left alone: requeueing never delivers a processed
// fact again. On PostgreSQL, at its commit every relay that listens
// (Config.Notify) is told to look below its scan floor, where a requeued row
// lies (its created_at, the event's time, is kept), so a running relay claims
// the rows at once rather than at its next sweep; on SQLite a relay finds them
// at its next sweep.
func Requeue(ctx context.Context, store Store, ids []uuid.UUID) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := store.Requeue(ctx, ids, false, time.Now().UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("outbox: requeue: %w", err)
	}
	return n, nil
}

// RequeueAllFailed is Requeue for every failed row.
func RequeueAllFailed(ctx context.Context, store Store) (int64, error) {
	n, err := store.Requeue(ctx, nil, true, time.Now().UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("outbox: requeue all failed: %w", err)
	}
	return n, nil
}

// Delete deletes the rows named by ids if every one is failed or processed; if any
// is pending it deletes nothing and returns an error wrapping ErrPending that
// names the pending ids. Ids of absent rows are ignored. The check and the delete
// run in one transaction that holds the rows (PostgreSQL locks them; SQLite holds
// the write lock), so none can be requeued or reclaimed between them.
func Delete(ctx context.Context, store Store, ids []uuid.UUID) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	deleted, err := store.Delete(ctx, ids)
	if err != nil {
		if errors.Is(err, ErrPending) {
			return 0, err
		}
		return 0, fmt.Errorf("outbox: delete: %w", err)
	}
	return deleted, nil
}

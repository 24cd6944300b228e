package outbox

import (
	"context"
	"errors"

	"github.com/google/uuid"
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
func Failed(ctx context.Context, pool *pgxpool.Pool) ([]FailedRow, error) { return nil, errors.New("TODO") }

// Requeue makes the failed rows among ids pending again, available now, with their
// attempts reset to 0. It returns how many rows it changed.
func Requeue(ctx context.Context, pool *pgxpool.Pool, ids []uuid.UUID) (int64, error) {
	return 0, errors.New("TODO")
}

// RequeueAllFailed is Requeue for every failed row.
func RequeueAllFailed(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	return 0, errors.New("TODO")
}

// Delete deletes the rows named by ids if every one is failed or processed; if any
// is pending it deletes nothing and returns an error wrapping ErrPending.
func Delete(ctx context.Context, pool *pgxpool.Pool, ids []uuid.UUID) (int64, error) {
	return 0, errors.New("TODO")
}

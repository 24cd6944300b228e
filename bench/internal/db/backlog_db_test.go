package db

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/bench/internal/sitting"
)

// TestFillOutboxWritesAppendsIDs: the drains' backlog has the ids Append
// writes, UUIDv7 of each row's created_at, so the primary key is in time order.
func TestFillOutboxWritesAppendsIDs(t *testing.T) {
	t.Parallel()
	dbURL := os.Getenv("TEST_DATABASE_URL")
	if dbURL == "" {
		t.Skip("TEST_DATABASE_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e, err := sitting.NewEnv(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(e.Close)
	dbURL, err = e.Create(ctx, sitting.SchemaLabeling)
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, FillOutbox(ctx, tx, 1000))
	require.NoError(t, tx.Commit(ctx))
	rows, err := pool.Query(ctx, `SELECT id, created_at FROM outbox_events ORDER BY id`)
	require.NoError(t, err)
	type row struct {
		ID        uuid.UUID
		CreatedAt int64
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	require.Len(t, got, 1000)
	for i, r := range got {
		require.Equal(t, uuid.Version(7), r.ID.Version(), "row %d: %s", i, r.ID)
		require.Equal(t, uuid.RFC4122, r.ID.Variant(), "row %d: %s", i, r.ID)
		sec, nsec := r.ID.Time().UnixTime()
		require.Equal(t, r.CreatedAt, sec*1000+nsec/1e6, "row %d: the id's time is its created_at", i)
		if i > 0 {
			require.Greater(t, r.CreatedAt, got[i-1].CreatedAt, "ids sort as created_at does")
		}
	}
}

package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
)

func TestAppend(t *testing.T) {
	t.Parallel()

	t.Run("a rolled-back transaction leaves no row", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		rollback := errors.New("roll back")
		err := pgx.BeginFunc(context.Background(), db.Pool, func(tx pgx.Tx) error {
			_, err := outbox.Append(context.Background(), outbox.NewPostgresStore(nil), postgres.TxOf(tx), thing{N: 1})
			require.NoError(t, err)
			return rollback
		})
		require.ErrorIs(t, err, rollback)
		require.Zero(t, count(t, pg(db.Pool), "true"))
	})

	t.Run("a committed transaction leaves exactly one pending row with a UUIDv7 id", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		before := time.Now().UnixMilli()
		ids := appendEvents(t, pg(db.Pool), thing{N: 7})

		rows := allRows(t, pg(db.Pool))
		require.Len(t, rows, 1)
		r := rows[0]
		require.Equal(t, ids[0], r.ID)
		require.Equal(t, uuid.Version(7), r.ID.Version())
		require.Equal(t, "Thing", r.Tag)
		require.JSONEq(t, `{"n":7}`, r.Payload)
		require.GreaterOrEqual(t, r.CreatedAt, before)
		require.Equal(t, r.CreatedAt, r.AvailableAt)
		require.Zero(t, r.Attempts)
		require.Nil(t, r.ClaimedUntil)
		require.Nil(t, r.ProcessedAt)
		require.Nil(t, r.FailedAt)
		require.Nil(t, r.LastError)
	})

	t.Run("every append is a new row with a new id", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		ids := appendEvents(t, pg(db.Pool), thing{N: 1}, thing{N: 1})
		require.NotEqual(t, ids[0], ids[1])
		require.Equal(t, 2, count(t, pg(db.Pool), "true"))
	})
}

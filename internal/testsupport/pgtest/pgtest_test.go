package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

func TestNew(t *testing.T) {
	t.Parallel()

	t.Run("each test gets its own migrated database", func(t *testing.T) {
		t.Parallel()
		a := pgtest.New(t, migrations.Labeling)
		b := pgtest.New(t, migrations.Labeling)
		require.NotEqual(t, a.Name, b.Name)

		ctx := context.Background()
		_, err := a.Pool.Exec(ctx, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at)
			VALUES (gen_random_uuid(), 't', '{}', 0, 0)`)
		require.NoError(t, err)
		var n int
		require.NoError(t, b.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events`).Scan(&n))
		require.Zero(t, n, "a write in one test's database is invisible to another's")
	})

	t.Run("billing set creates billing tables only", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t, migrations.Billing)
		var tables []string
		rows, err := db.Pool.Query(context.Background(),
			`SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> $1 ORDER BY 1`, migrations.Billing.Table)
		require.NoError(t, err)
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			tables = append(tables, s)
		}
		require.NoError(t, rows.Err())
		require.Equal(t, []string{"billing_nats_failed", "billing_nats_failed_size", "billing_outbox_events", "billing_quota", "billing_receipts"}, tables)
	})
}

func TestEmpty(t *testing.T) {
	t.Parallel()

	t.Run("the database has no tables and is dropped when the test ends", func(t *testing.T) {
		t.Parallel()
		var name string
		t.Run("use", func(t *testing.T) {
			db := pgtest.Empty(t)
			name = db.Name
			var n int
			require.NoError(t, db.Pool.QueryRow(context.Background(),
				`SELECT count(*) FROM pg_tables WHERE schemaname = 'public'`).Scan(&n))
			require.Zero(t, n)
		})
		conn, err := pgx.Connect(context.Background(), pgtest.ServerURL(t))
		require.NoError(t, err)
		defer conn.Close(context.Background())
		var exists bool
		require.NoError(t, conn.QueryRow(context.Background(),
			`SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name).Scan(&exists))
		require.False(t, exists)
	})
}

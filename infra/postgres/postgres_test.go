package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

func TestUnavailable(t *testing.T) {
	t.Parallel()

	t.Run("a refused connection is unavailable", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		pool, err := postgres.Open(ctx, "postgres://postgres@127.0.0.1:1/x?sslmode=disable")
		require.NoError(t, err)
		defer pool.Close()
		_, err = pool.Exec(ctx, "SELECT 1")
		require.Error(t, err)
		require.True(t, postgres.Unavailable(err), "%v", err)
	})

	t.Run("a statement the database refuses is not unavailable", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t, migrations.Billing)
		_, err := db.Pool.Exec(context.Background(), "SELECT * FROM no_such_table")
		require.Error(t, err)
		require.False(t, postgres.Unavailable(err))
	})

	t.Run("a terminated backend is unavailable", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t, migrations.Billing)
		ctx := context.Background()
		conn, err := db.Pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release()
		var pid int32
		require.NoError(t, conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		_, err = db.Pool.Exec(ctx, "SELECT pg_terminate_backend($1)", pid)
		require.NoError(t, err)
		_, err = conn.Exec(ctx, "SELECT 1")
		require.Error(t, err)
		require.True(t, postgres.Unavailable(err), "%v", err)
	})
}

func TestMigrate(t *testing.T) {
	t.Parallel()

	t.Run("replicas migrating at once all succeed and apply each migration once", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t, migrations.Billing)
		ctx := context.Background()
		// Start from an empty schema so the migrations really run.
		_, err := db.Pool.Exec(ctx, "DROP TABLE billing_receipts, billing_quota, billing_nats_failed, goose_db_version")
		require.NoError(t, err)
		errs := make(chan error, 4)
		for range 4 {
			go func() { errs <- postgres.MigrateURL(ctx, db.URL, migrations.Billing, nil) }()
		}
		for range 4 {
			require.NoError(t, <-errs)
		}
		var applied int
		require.NoError(t, db.Pool.QueryRow(ctx,
			"SELECT count(*) FROM goose_db_version WHERE version_id > 0").Scan(&applied))
		require.Equal(t, 2, applied, "each of the billing set's migrations once")
	})
}

func TestOpenPoolSize(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("without pool_max_conns the pool has room for the API and the relay", func(t *testing.T) {
		t.Parallel()
		pool, err := postgres.Open(ctx, "postgres://u@127.0.0.1:1/db")
		require.NoError(t, err)
		defer pool.Close()
		require.GreaterOrEqual(t, pool.Config().MaxConns, int32(postgres.DefaultMaxConns))
	})

	t.Run("a pool_max_conns in the URL is honoured", func(t *testing.T) {
		t.Parallel()
		for _, url := range []string{"postgres://u@127.0.0.1:1/db?pool_max_conns=3", "host=127.0.0.1 port=1 user=u pool_max_conns=3"} {
			pool, err := postgres.Open(ctx, url)
			require.NoError(t, err)
			require.EqualValues(t, 3, pool.Config().MaxConns, url)
			pool.Close()
		}
	})
}

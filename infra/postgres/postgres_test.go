package postgres_test

import (
	"context"
	"io/fs"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
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
		db := pgtest.Empty(t)
		ctx := context.Background()
		errs := make(chan error, 4)
		for range 4 {
			go func() { errs <- postgres.MigrateURL(ctx, db.URL, migrations.Billing, nil) }()
		}
		for range 4 {
			require.NoError(t, <-errs)
		}
		require.Equal(t, sourceVersions(t, migrations.Billing), applied(t, db, migrations.Billing.Table), "each of the billing set's migrations once")
	})

	t.Run("both services migrate one database in either order, each in its own table", func(t *testing.T) {
		t.Parallel()
		for _, order := range [][]migrations.Set{
			{migrations.Labeling, migrations.Billing},
			{migrations.Billing, migrations.Labeling},
		} {
			db := pgtest.Empty(t)
			for _, set := range order {
				require.NoError(t, postgres.MigrateURL(t.Context(), db.URL, set, nil), set.Table)
			}
			require.Equal(t, sourceVersions(t, migrations.Labeling), applied(t, db, migrations.Labeling.Table))
			require.Equal(t, sourceVersions(t, migrations.Billing), applied(t, db, migrations.Billing.Table))
			for _, table := range []string{"outbox_events", "labeling_rules", "billing_quota", "billing_receipts", "billing_nats_failed"} {
				requireTable(t, db, table, true)
			}
			requireTable(t, db, migrations.LegacyTable, false)
		}
	})

	// An earlier build recorded either service's migrations in goose's default
	// table; legacyMigrate makes that state the way that build did.
	t.Run("an earlier goose_db_version is adopted by its service and nothing migrates twice", func(t *testing.T) {
		t.Parallel()
		for _, set := range []migrations.Set{migrations.Labeling, migrations.Billing} {
			db := pgtest.Empty(t)
			want := legacyMigrate(t, db, set)
			// Were a migration applied again, its CREATE TABLE would fail.
			require.NoError(t, postgres.MigrateURL(t.Context(), db.URL, set, nil), set.Table)
			require.Equal(t, want, applied(t, db, set.Table))
			// The adopted history starts like goose's own: version 0 first.
			var first int64
			require.NoError(t, db.Pool.QueryRow(t.Context(),
				"SELECT version_id FROM "+set.Table+" ORDER BY id LIMIT 1").Scan(&first))
			require.Zero(t, first)
			// A second start finds its own table and changes nothing.
			require.NoError(t, postgres.MigrateURL(t.Context(), db.URL, set, nil))
			require.Equal(t, want, applied(t, db, set.Table))
		}
	})

	t.Run("the other service's earlier goose_db_version is not adopted: its own migrations run", func(t *testing.T) {
		t.Parallel()
		for _, pair := range [][2]migrations.Set{
			{migrations.Labeling, migrations.Billing},
			{migrations.Billing, migrations.Labeling},
		} {
			legacy, other := pair[0], pair[1]
			db := pgtest.Empty(t)
			legacyMigrate(t, db, legacy)
			require.NoError(t, postgres.MigrateURL(t.Context(), db.URL, other, nil), other.Table)
			requireTable(t, db, other.Marker, true)
			require.Equal(t, sourceVersions(t, other), applied(t, db, other.Table))
			// Then the earlier service starts and adopts its own history.
			require.NoError(t, postgres.MigrateURL(t.Context(), db.URL, legacy, nil), legacy.Table)
			require.Equal(t, applied(t, db, migrations.LegacyTable), applied(t, db, legacy.Table))
		}
	})

	t.Run("replicas adopting at once copy the earlier table once", func(t *testing.T) {
		t.Parallel()
		db := pgtest.Empty(t)
		want := legacyMigrate(t, db, migrations.Labeling)
		errs := make(chan error, 4)
		for range 4 {
			go func() { errs <- postgres.MigrateURL(t.Context(), db.URL, migrations.Labeling, nil) }()
		}
		for range 4 {
			require.NoError(t, <-errs)
		}
		require.Equal(t, want, applied(t, db, migrations.Labeling.Table))
	})
}

// legacyMigrate applies set the way builds before per-service tables did: in
// goose's default goose_db_version. It returns the versions applied.
func legacyMigrate(t *testing.T, db *pgtest.DB, set migrations.Set) []int64 {
	t.Helper()
	sqlDB := stdlib.OpenDBFromPool(db.Pool)
	defer sqlDB.Close()
	provider, err := goose.NewProvider(goose.DialectPostgres, sqlDB, set, goose.WithDisableGlobalRegistry(true))
	require.NoError(t, err)
	_, err = provider.Up(t.Context())
	require.NoError(t, err)
	versions := applied(t, db, migrations.LegacyTable)
	require.NotEmpty(t, versions)
	return versions
}

// sourceVersions are the versions of set's files, in order.
func sourceVersions(t *testing.T, set migrations.Set) []int64 {
	t.Helper()
	names, err := fs.Glob(set, "*.sql")
	require.NoError(t, err)
	var versions []int64
	for _, name := range names {
		v, err := goose.NumericComponent(name)
		require.NoError(t, err)
		versions = append(versions, v)
	}
	slices.Sort(versions)
	require.NotEmpty(t, versions)
	return versions
}

// applied lists the versions table records as applied (without goose's 0), in
// the order they were applied.
func applied(t *testing.T, db *pgtest.DB, table string) []int64 {
	t.Helper()
	rows, err := db.Pool.Query(t.Context(),
		"SELECT version_id FROM "+table+" WHERE version_id > 0 AND is_applied ORDER BY id")
	require.NoError(t, err)
	versions, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return versions
}

func requireTable(t *testing.T, db *pgtest.DB, table string, exists bool) {
	t.Helper()
	var found bool
	require.NoError(t, db.Pool.QueryRow(t.Context(), "SELECT to_regclass($1) IS NOT NULL", table).Scan(&found))
	require.Equal(t, exists, found, "table %s", table)
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

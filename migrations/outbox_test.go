package migrations_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

// TestBillingOutboxIsLabelingOutbox: billing's outbox table, applied, is
// labeling's outbox_events under another name, on both dialects: the same
// columns (order, types, nullability, defaults), the same indexes and
// constraints, and on PostgreSQL the same storage settings. infra/outbox runs
// the same statements on both (outbox.WithTable), so any difference is a
// statement that works on one and fails, or plans differently, on the other.
func TestBillingOutboxIsLabelingOutbox(t *testing.T) {
	t.Parallel()
	const labeling, billing = "outbox_events", "billing_outbox_events"

	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		lab, bill := pgtest.New(t, migrations.Labeling), pgtest.New(t, migrations.Billing)
		require.Equal(t, pgSchema(t, lab.Pool, labeling), pgSchema(t, bill.Pool, billing))
	})

	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		lab, bill := sqliteMigrated(t, migrations.Labeling), sqliteMigrated(t, migrations.Billing)
		require.Equal(t, sqliteSchema(t, lab, labeling), sqliteSchema(t, bill, billing))
	})
}

// pgSchema describes table with its own name replaced by TABLE: its columns,
// indexes, constraints and storage options, one line each.
func pgSchema(t *testing.T, pool *pgxpool.Pool, table string) []string {
	t.Helper()
	ctx := context.Background()
	var out []string
	for _, q := range []string{
		`SELECT 'column ' || ordinal_position || ' ' || column_name || ' ' || data_type || ' nullable=' || is_nullable || ' default=' || coalesce(column_default, '')
			FROM information_schema.columns WHERE table_schema = 'public' AND table_name = $1 ORDER BY ordinal_position`,
		`SELECT 'index ' || indexdef FROM pg_indexes WHERE schemaname = 'public' AND tablename = $1 ORDER BY indexname`,
		`SELECT 'constraint ' || contype::text || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
			WHERE conrelid = ('public.' || $1)::regclass ORDER BY contype, pg_get_constraintdef(oid)`,
		`SELECT 'options ' || coalesce(array_to_string(reloptions, ','), '') FROM pg_class WHERE oid = ('public.' || $1)::regclass`,
	} {
		rows, err := pool.Query(ctx, q, table)
		require.NoError(t, err)
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			out = append(out, strings.ReplaceAll(line, table, "TABLE"))
		}
		require.NoError(t, rows.Err())
	}
	require.Greater(t, len(out), 15, "%s has its columns, indexes and options", table)
	return out
}

func sqliteMigrated(t *testing.T, set migrations.Set) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "m.db"), sqldb.Bounds{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, sqlite.Migrate(context.Background(), db, set.SQLite, set.Table, nil))
	return db
}

// sqliteSchema is pgSchema on SQLite: columns from pragma_table_info, the
// indexes as their CREATE statements.
func sqliteSchema(t *testing.T, db *sqlite.DB, table string) []string {
	t.Helper()
	var out []string
	for _, q := range []string{
		`SELECT 'column ' || cid || ' ' || name || ' ' || type || ' notnull=' || "notnull" || ' default=' || coalesce(dflt_value, '') || ' pk=' || pk
			FROM pragma_table_info(?1) ORDER BY cid`,
		`SELECT 'index ' || name || ' ' || coalesce(sql, '') FROM sqlite_schema WHERE type = 'index' AND tbl_name = ?1 ORDER BY name`,
	} {
		rows, err := db.Read.Query(q, table)
		require.NoError(t, err)
		for rows.Next() {
			var line string
			require.NoError(t, rows.Scan(&line))
			out = append(out, strings.ReplaceAll(line, table, "TABLE"))
		}
		require.NoError(t, rows.Err())
		require.NoError(t, rows.Close())
	}
	require.Greater(t, len(out), 13, "%s has its columns and indexes", table)
	return out
}

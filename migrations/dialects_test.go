package migrations_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"slices"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

func versions(t *testing.T, fsys fs.FS) []int64 {
	t.Helper()
	names, err := fs.Glob(fsys, "*.sql")
	require.NoError(t, err)
	var out []int64
	for _, n := range names {
		v, err := goose.NumericComponent(n)
		require.NoError(t, err)
		out = append(out, v)
	}
	slices.Sort(out)
	return out
}

// TestDialectsAgree: each service's PostgreSQL and SQLite sets hold the same
// versions and, applied, end in the same tables with the same columns
// (contract section 2 holds on both).
func TestDialectsAgree(t *testing.T) {
	t.Parallel()
	for _, set := range []struct {
		name     string
		pg, lite fs.FS
		table    string
		set      migrations.Set
	}{
		{"labeling", migrations.Labeling.FS, migrations.Labeling.SQLite, migrations.Labeling.Table, migrations.Labeling},
		{"billing", migrations.Billing.FS, migrations.Billing.SQLite, migrations.Billing.Table, migrations.Billing},
	} {
		t.Run(set.name+" has the same versions and ends in the same tables and columns", func(t *testing.T) {
			t.Parallel()
			require.NotEmpty(t, versions(t, set.pg))
			require.Equal(t, versions(t, set.pg), versions(t, set.lite))

			pg := pgtest.New(t, set.set)
			rows, err := pg.Pool.Query(context.Background(), `
				SELECT table_name || '.' || column_name FROM information_schema.columns
				WHERE table_schema = 'public' AND table_name NOT LIKE '%goose_db_version'
				ORDER BY 1`)
			require.NoError(t, err)
			var pgCols []string
			for rows.Next() {
				var c string
				require.NoError(t, rows.Scan(&c))
				pgCols = append(pgCols, c)
			}
			require.NoError(t, rows.Err())

			db, err := sqlite.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "m.db"), sqldb.Bounds{})
			require.NoError(t, err)
			defer db.Close()
			require.NoError(t, sqlite.Migrate(context.Background(), db, set.lite, set.table, nil))
			lrows, err := db.Read.Query(`
				SELECT m.name || '.' || c.name FROM sqlite_schema m, pragma_table_info(m.name) c
				WHERE m.type = 'table' AND m.name NOT LIKE 'sqlite_%' AND m.name NOT LIKE '%goose_db_version'
				ORDER BY 1`)
			require.NoError(t, err)
			defer lrows.Close()
			var liteCols []string
			for lrows.Next() {
				var c string
				require.NoError(t, lrows.Scan(&c))
				liteCols = append(liteCols, c)
			}
			require.NoError(t, lrows.Err())
			require.NotEmpty(t, pgCols)
			require.Equal(t, pgCols, liteCols)
		})
	}
}

// Package dbtest gives a test a fresh, migrated database in either dialect, so
// that one table of cases runs on PostgreSQL and on SQLite: Each runs a test
// body once per dialect as subtests named "postgres" and "sqlite".
//
// The PostgreSQL half is pgtest's (TEST_DATABASE_URL, or a container; with
// neither it fails saying what to set, never skips). The SQLite half needs no
// server: a file in t.TempDir(), opened and migrated as serve opens it.
//
// Raw SQL for inspecting rows ($1, $2 … placeholders, which SQLite reads as
// ordinals too) goes through Exec, QueryRow and Query, on both dialects.
package dbtest

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

// Dialects are the dialects every Each runs, PostgreSQL first.
var Dialects = []sqldb.Dialect{sqldb.Postgres, sqldb.SQLite}

// Each runs fn as a parallel subtest per dialect, named after it.
func Each(t *testing.T, fn func(t *testing.T, d sqldb.Dialect)) {
	t.Helper()
	for _, d := range Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			fn(t, d)
		})
	}
}

// DB is one test's database. It is not a sqldb.DB itself: pass DB.DB, the
// opened database (a *postgres.DB or *sqlite.DB), where one is asked for,
// so that database.Pick finds its dialect.
type DB struct {
	DB     sqldb.DB      // the opened database
	URL    string        // its DATABASE_URL, for a child process
	Pool   *pgxpool.Pool // PostgreSQL only
	SQLite *sqlite.DB    // SQLite only
}

// Dialect is the database's dialect.
func (db *DB) Dialect() sqldb.Dialect { return db.DB.Dialect() }

// New returns a fresh database of dialect d with every migration of set
// applied, closed (and dropped) when t ends.
func New(t testing.TB, d sqldb.Dialect, set migrations.Set) *DB {
	t.Helper()
	if d == sqldb.Postgres {
		pg := pgtest.New(t, set)
		return &DB{DB: postgres.NewDB(pg.Pool), URL: pg.URL, Pool: pg.Pool}
	}
	db := OpenSQLite(t, "sqlite:"+filepath.Join(t.TempDir(), "test.db"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, sqlite.Migrate(ctx, db.SQLite, set.SQLite, set.Table, nil))
	return db
}

// OpenSQLite opens (and creates) the SQLite file of url as serve does, with
// bounds that keep a busy test from failing at once; closed when t ends.
func OpenSQLite(t testing.TB, url string) *DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), url, sqldb.Bounds{StatementTimeout: 10 * time.Second, LockTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return &DB{DB: db, URL: url, SQLite: db}
}

// Close closes the database early (a test of an unreachable one); the
// cleanup's close is then a no-op.
func (db *DB) Close() {
	if db.Pool != nil {
		db.Pool.Close()
		return
	}
	db.SQLite.Close()
}

// Exec runs one statement and returns the rows it changed.
func (db *DB) Exec(t testing.TB, query string, args ...any) int64 {
	t.Helper()
	ctx := context.Background()
	if db.Pool != nil {
		tag, err := db.Pool.Exec(ctx, query, args...)
		require.NoError(t, err)
		return tag.RowsAffected()
	}
	res, err := db.SQLite.Write.ExecContext(ctx, query, args...)
	require.NoError(t, err)
	n, err := res.RowsAffected()
	require.NoError(t, err)
	return n
}

// Row is one row of QueryRow.
type Row interface{ Scan(dest ...any) error }

// QueryRow runs a query of one row (on SQLite on the writer, so that it sees
// the test's last write at once).
func (db *DB) QueryRow(query string, args ...any) Row {
	ctx := context.Background()
	if db.Pool != nil {
		return db.Pool.QueryRow(ctx, query, args...)
	}
	return db.SQLite.Write.QueryRowContext(ctx, query, args...)
}

// Rows are the rows of Query.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

// Query runs a query; its rows are closed when t ends or when Next returns false.
func (db *DB) Query(t testing.TB, query string, args ...any) Rows {
	t.Helper()
	ctx := context.Background()
	if db.Pool != nil {
		rows, err := db.Pool.Query(ctx, query, args...)
		require.NoError(t, err)
		t.Cleanup(rows.Close)
		return rows
	}
	rows, err := db.SQLite.Write.QueryContext(ctx, query, args...)
	require.NoError(t, err)
	t.Cleanup(func() { rows.Close() })
	return rows
}

// Count returns the count(*) a query answers.
func (db *DB) Count(t testing.TB, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, db.QueryRow(query, args...).Scan(&n))
	return n
}

// NoRows reports whether err is either dialect's "no rows".
func NoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) || errors.Is(err, sql.ErrNoRows) }

package database_test

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

var names = database.Dialects[string]{
	Postgres: func(*postgres.DB) string { return "postgres" },
	SQLite:   func(*sqlite.DB) string { return "sqlite" },
}

// notOpened is a sqldb.DB that no dialect opened (a wrapper, a test double).
type notOpened struct{ sqldb.DB }

func TestPick(t *testing.T) {
	t.Parallel()
	require.Equal(t, "postgres", database.Pick(postgres.NewDB(nil), names))

	db, err := database.Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "t.db"), sqldb.Bounds{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.Equal(t, "sqlite", database.Pick(db, names), "Open's SQLite database")

	require.PanicsWithValue(t,
		"database: database_test.notOpened is not an opened database of either dialect (pass the DB Open returned)",
		func() { database.Pick(notOpened{}, names) }, "a wiring defect names what it was handed")
}

// Name is the one-line name the operator commands print (infra/cli's
// OpenDatabase): Describe's attributes, never the password, a value that would
// not read as one word quoted.
func TestName(t *testing.T) {
	t.Parallel()
	open := func(t *testing.T, url string) database.DB {
		t.Helper()
		// A PostgreSQL Open does not connect: no server is needed to name one.
		db, err := database.Open(context.Background(), url, sqldb.Bounds{})
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		return db
	}

	t.Run("postgres is named by host, port and database, never the password", func(t *testing.T) {
		t.Parallel()
		db := open(t, "postgres://app:s3cret-pass@db.internal:6543/billing?sslmode=disable")
		require.Equal(t, "postgres host=db.internal port=6543 database=billing", database.Name(db))
	})

	t.Run("sqlite is named by its absolute path, without created", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "labeling.db")
		require.Equal(t, "sqlite path="+path, database.Name(open(t, "sqlite:"+path)))
	})

	t.Run("a value with a space is quoted", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "my data", "x.db")
		require.Equal(t, "sqlite path="+strconv.Quote(path), database.Name(open(t, "sqlite:"+path)))
	})
}

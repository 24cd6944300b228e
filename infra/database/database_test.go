package database_test

import (
	"context"
	"path/filepath"
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

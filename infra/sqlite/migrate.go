package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/pressly/goose/v3"

	"github.com/acme/outboxpair/migrations"
)

// Migrate applies every pending migration of fsys to the file of db, recording
// them in table (goose's sqlite3 dialect). goose has no lock for SQLite, so the
// whole run holds an exclusive lock on a file beside the database
// (PATH-migrate.lock): replicas that start together on one file migrate one
// after another, and each later one finds nothing pending. It never touches
// goose's global state.
func Migrate(ctx context.Context, db *DB, fsys fs.FS, table string, logger *slog.Logger) error {
	unlock, err := lockFile(ctx, db.Path+"-migrate.lock")
	if err != nil {
		return fmt.Errorf("migrate: lock %s: %w", db.Path, err)
	}
	defer unlock()
	// A connection of its own, without the statement timeout: a migration may
	// rightly take longer than any request. One connection: goose's statements
	// and its transactions never wait for each other.
	mdb, err := sql.Open("sqlite", DSN(db.Path, db.bounds.LockTimeout, true, false))
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer mdb.Close()
	mdb.SetMaxOpenConns(1)
	provider, err := goose.NewProvider(goose.DialectSQLite3, mdb, fsys,
		goose.WithTableName(table),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return migrations.Up(ctx, provider, logger)
}

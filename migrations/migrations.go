// Package migrations embeds the SQL schema of each service database, in each
// dialect: migrations/<service>/postgres and migrations/<service>/sqlite hold
// the same version numbers and end in the same tables and columns
// (TestDialectsAgree). Each service owns one set and applies it with goose at
// start-up; neither reads the other's tables.
package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/pressly/goose/v3"
)

//go:embed labeling/postgres/*.sql billing/postgres/*.sql labeling/sqlite/*.sql billing/sqlite/*.sql
var files embed.FS

// Set is one service's migrations: the files goose applies (the embedded fs.FS),
// the table goose records them in, and the table that tells an earlier shared
// record of them apart from the other service's.
type Set struct {
	fs.FS // the PostgreSQL files
	// SQLite is the same set in SQLite's form (same versions, same Table).
	SQLite fs.FS
	// Table is the goose version table of this set alone (contract section 2), so
	// both services may migrate one database without skipping each other's
	// versions, which share numbers.
	Table string
	// Marker is a table this set's first migration creates and the other set's
	// never does: an earlier goose_db_version, which both services used to share,
	// records this set's versions only where Marker exists (postgres.Migrate
	// adopts it then).
	Marker string
}

// LegacyTable is goose's default version table, which both services recorded
// their migrations in before each got its own Table.
const LegacyTable = "goose_db_version"

// Labeling is the migration set of the labeling database (labeling_rules and outbox_events).
var Labeling = Set{FS: sub("labeling/postgres"), SQLite: sub("labeling/sqlite"), Table: "labeling_goose_db_version", Marker: "outbox_events"}

// Billing is the migration set of the billing database (billing_quota, billing_receipts,
// billing_nats_failed and billing_outbox_events, billing's own outbox).
var Billing = Set{FS: sub("billing/postgres"), SQLite: sub("billing/sqlite"), Table: "billing_goose_db_version", Marker: "billing_quota"}

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err)
	}
	return f
}

// Up applies every pending migration of provider (either dialect's) and logs
// each one applied, when logger is not nil: the one step both dialects' Migrate
// end with.
func Up(ctx context.Context, provider *goose.Provider, logger *slog.Logger) error {
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if logger != nil {
		for _, r := range results {
			logger.Info("migration applied", "source", r.Source.Path, "duration", r.Duration)
		}
		// One line that says what was done, also when nothing was (contract
		// section 1): "migrations: applied 2, now at version 5".
		version, err := provider.GetDBVersion(ctx)
		if err != nil {
			return fmt.Errorf("migrate: read the version: %w", err)
		}
		msg := fmt.Sprintf("migrations: applied %d, now at version %d", len(results), version)
		if len(results) == 0 {
			msg = fmt.Sprintf("migrations: at version %d, nothing to apply", version)
		}
		logger.Info(msg, "applied", len(results), "version", version)
	}
	return nil
}

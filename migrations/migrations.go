// Package migrations embeds the SQL schema of each service database. Each service
// owns one set and applies it with goose at start-up; neither reads the other's tables.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed labeling/*.sql billing/*.sql
var files embed.FS

// Set is one service's migrations: the files goose applies (the embedded fs.FS),
// the table goose records them in, and the table that tells an earlier shared
// record of them apart from the other service's.
type Set struct {
	fs.FS
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
var Labeling = Set{FS: sub("labeling"), Table: "labeling_goose_db_version", Marker: "outbox_events"}

// Billing is the migration set of the billing database (billing_quota, billing_receipts
// and billing_nats_failed).
var Billing = Set{FS: sub("billing"), Table: "billing_goose_db_version", Marker: "billing_quota"}

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err)
	}
	return f
}

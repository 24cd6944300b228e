// Package migrations embeds the SQL schema of each service database. Each service
// owns one set and applies it with goose at start-up; neither reads the other's tables.
package migrations

import (
	"embed"
	"io/fs"
)

//go:embed labeling/*.sql billing/*.sql
var files embed.FS

// Labeling is the migration set of the labeling database (labeling_rules and outbox_events).
var Labeling = sub("labeling")

// Billing is the migration set of the billing database (billing_quota, billing_receipts
// and billing_nats_failed).
var Billing = sub("billing")

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err)
	}
	return f
}

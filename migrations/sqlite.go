package migrations

import (
	"embed"
	"io/fs"
)

// The SQLite form of each set: the same version numbers, ending in the same
// tables and columns (TestDialectsAgree), in SQLite's types.
//
//go:embed labeling/sqlite/*.sql billing/sqlite/*.sql
var sqliteFiles embed.FS

// LabelingSQLite is the labeling set for SQLite.
var LabelingSQLite = subOf(sqliteFiles, "labeling/sqlite")

// BillingSQLite is the billing set for SQLite.
var BillingSQLite = subOf(sqliteFiles, "billing/sqlite")

func subOf(f fs.FS, dir string) fs.FS {
	s, err := fs.Sub(f, dir)
	if err != nil {
		panic(err)
	}
	return s
}

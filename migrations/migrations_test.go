package migrations_test

import (
	"io/fs"
	"regexp"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/migrations"
)

// created lists the tables each file of set creates, by file name.
func created(t *testing.T, set migrations.Set) map[string][]string {
	t.Helper()
	create := regexp.MustCompile(`(?i)CREATE TABLE (?:IF NOT EXISTS )?([a-z_][a-z0-9_]*)`)
	names, err := fs.Glob(set, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	out := map[string][]string{}
	for _, name := range names {
		b, err := fs.ReadFile(set, name)
		require.NoError(t, err)
		for _, m := range create.FindAllStringSubmatch(string(b), -1) {
			out[name] = append(out[name], m[1])
		}
	}
	return out
}

// Adoption of an earlier goose_db_version (infra/postgres) trusts the marker to
// say whose versions it holds: that holds only while the marker is created by
// its set's first migration and by nothing of the other set.
func TestMarkers(t *testing.T) {
	t.Parallel()
	sets := []migrations.Set{migrations.Labeling, migrations.Billing}
	for i, set := range sets {
		t.Run(set.Table+"'s marker is its first migration's table and no other set's", func(t *testing.T) {
			t.Parallel()
			own := created(t, set)
			names, err := fs.Glob(set, "*.sql")
			require.NoError(t, err)
			slices.Sort(names)
			require.Contains(t, own[names[0]], set.Marker)
			other := sets[1-i]
			for name, tables := range created(t, other) {
				require.NotContains(t, tables, set.Marker, "%s of the other set", name)
			}
			require.NotEqual(t, set.Table, other.Table)
			require.NotEqual(t, migrations.LegacyTable, set.Table)
		})
	}
}

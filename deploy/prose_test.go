package deploy

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProseFitsAnAfternoon holds the sizes issue 37 set, so the prose a team
// reads before it owns the template does not grow back: the README, docs/ as
// a whole, the contract and the benchmark summary (each sitting's full report
// lives in bench/results/).
func TestProseFitsAnAfternoon(t *testing.T) {
	t.Parallel()
	lines := func(path string) int { return strings.Count(read(t, path), "\n") }
	for path, most := range map[string]int{"README.md": 150, "CONTRACT.md": 300, "BENCHMARKS.md": 150} {
		require.LessOrEqual(t, lines(path), most, "%s has more than %d lines", path, most)
	}
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	total := 0
	for _, p := range pages {
		rel, err := filepath.Rel(root, p)
		require.NoError(t, err)
		total += lines(rel)
	}
	require.LessOrEqual(t, total, 1800, "docs/ has %d lines in %d pages: more than 1,800", total, len(pages))
}

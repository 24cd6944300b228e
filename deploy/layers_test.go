package deploy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The house has floors: infra/ holds what every slice builds on, so no
// package under it may depend, directly or through another package, on a
// slice (labeling, billing, the example ledger) or a binary (cmd/): the
// environment loaders live beside the binaries that read them.
func TestInfraDependsOnNoSlice(t *testing.T) {
	t.Parallel()
	const module = "github.com/acme/outboxpair/"
	upstairs := []string{"labeling", "billing", "cmd", "example"}
	checked := 0
	for _, line := range goList(t, "-f", `{{.ImportPath}}{{range .Deps}},{{.}}{{end}}`, "./infra/...") {
		fields := strings.Split(line, ",")
		checked++
		for _, dep := range fields[1:] {
			rest, ours := strings.CutPrefix(dep, module)
			if !ours {
				continue
			}
			for _, up := range upstairs {
				require.False(t, rest == up || strings.HasPrefix(rest, up+"/"),
					"%s depends on %s: an infra package must not import a slice or a binary", fields[0], dep)
			}
		}
	}
	require.Greater(t, checked, 10, "go list listed too few packages")
}

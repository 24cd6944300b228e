package deploy

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/outbox"
)

// The README states the dead-letter window of the default retry settings. This
// recomputes it from the defaults with the relay's own rule
// (outbox.RetryDelayRange, which every retry delay is drawn from), so a change
// of a default, or of the rule, shows up as a README to update.
func TestREADMEDeadLetterWindow(t *testing.T) {
	t.Parallel()
	cfg, err := config.LoadLabeling(func(name string) (string, bool) {
		return map[string]string{"DATABASE_URL": "postgres://h/db", "EVENTS_TOKEN": "t"}[name], true
	})
	require.NoError(t, err)

	var lo, hi time.Duration
	for attempt := 1; attempt < cfg.MaxAttempts; attempt++ { // no wait after the last attempt
		l, h := outbox.RetryDelayRange(attempt, cfg.RetryBase, cfg.RetryMax)
		lo, hi = lo+l, hi+h
	}
	window := fmt.Sprintf("between %s and %s", lo.Round(time.Second), hi.Round(time.Second))
	require.Equal(t, "between 21m18s and 36m15s", window, "the defaults changed: update the README's Configuration section")
	require.Contains(t, read(t, "README.md"), "dead-lettered **"+window+"**")
}

// The README's Package map lists every package of the module, one row each, and
// nothing that is not one: a package moved, added or removed shows up as a map
// to update.
func TestREADMEPackageMap(t *testing.T) {
	t.Parallel()
	readme := read(t, "README.md")
	start := strings.Index(readme, "## Package map\n")
	require.GreaterOrEqual(t, start, 0, "README.md has no Package map section")
	section := readme[start+len("## Package map\n"):]
	section = section[:strings.Index(section, "\n## ")]
	var listed []string
	for _, line := range strings.Split(section, "\n") {
		if m := regexp.MustCompile("^\\| `([^`]+)` \\|").FindStringSubmatch(line); m != nil {
			listed = append(listed, m[1])
		}
	}
	const module = "github.com/acme/outboxpair/"
	var pkgs []string
	for _, p := range goList(t, "./...") {
		pkgs = append(pkgs, strings.TrimPrefix(p, module))
	}
	require.ElementsMatch(t, pkgs, listed, "the README's Package map does not match `go list ./...`")
}

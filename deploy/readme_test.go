package deploy

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	labelingconfig "github.com/acme/outboxpair/cmd/labeling/config"
	"github.com/acme/outboxpair/infra/outbox"
)

// The configuration page (docs/configuration.md, once the README's
// Configuration section) states the dead-letter window of the default retry
// settings. This recomputes it from the defaults with the relay's own rule
// (outbox.RetryDelayRange, which every retry delay is drawn from), so a change
// of a default, or of the rule, shows up as a page to update.
func TestREADMEDeadLetterWindow(t *testing.T) {
	t.Parallel()
	cfg, err := labelingconfig.LoadLabeling(func(name string) (string, bool) {
		return map[string]string{"DATABASE_URL": "postgres://h/db", "EVENTS_TOKEN": "t"}[name], true
	})
	require.NoError(t, err)

	var lo, hi time.Duration
	for attempt := 1; attempt < cfg.Relay.MaxAttempts; attempt++ { // no wait after the last attempt
		l, h := outbox.RetryDelayRange(attempt, cfg.Relay.RetryBase, cfg.Relay.RetryMax)
		lo, hi = lo+l, hi+h
	}
	window := fmt.Sprintf("between %s and %s", lo.Round(time.Second), hi.Round(time.Second))
	require.Equal(t, "between 21m18s and 36m15s", window, "the defaults changed: update docs/configuration.md")
	require.Contains(t, read(t, configurationPage), "dead-lettered **"+window+"**")
}

// The pages that hold what the README held before docs/ existed.
const (
	configurationPage = "docs/configuration.md"
	packageMapPage    = "docs/adopting.md"
)

// The Package map (docs/adopting.md) lists every package of the module, one row
// each, and nothing that is not one: a package moved, added or removed shows up
// as a map to update.
func TestREADMEPackageMap(t *testing.T) {
	t.Parallel()
	page := read(t, packageMapPage)
	start := strings.Index(page, "## Package map\n")
	require.GreaterOrEqual(t, start, 0, "%s has no Package map section", packageMapPage)
	section := page[start+len("## Package map\n"):]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
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
	require.ElementsMatch(t, pkgs, listed, "%s's Package map does not match `go list ./...`", packageMapPage)
}

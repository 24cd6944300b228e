package failpoint

import (
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
)

// action is what an armed point does. Parse is compiled into every build so that
// its tests run in the ordinary test command; a normal binary never references it,
// so the linker leaves it out.
type action struct {
	mu    sync.Mutex //nolint:unused // used by on.go, built only with -tags failpoints
	skip  int        // passes left before acting
	kind  string
	sleep time.Duration
}

// Parse reads a FAILPOINTS value.
func Parse(spec string) (map[string]*action, error) {
	m := map[string]*action{}
	for _, part := range strings.Split(spec, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, act, ok := strings.Cut(part, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("%q: want name=action", part)
		}
		a := &action{}
		if n, rest, ok := strings.Cut(act, "*"); ok {
			count, err := strconv.Atoi(n)
			if err != nil || count < 0 {
				return nil, fmt.Errorf("%q: bad count %q", part, n)
			}
			a.skip, act = count, rest
		}
		switch {
		case act == "exit", act == "error":
			a.kind = act
		case strings.HasPrefix(act, "sleep(") && strings.HasSuffix(act, ")"):
			d, err := time.ParseDuration(act[len("sleep(") : len(act)-1])
			if err != nil {
				return nil, fmt.Errorf("%q: %w", part, err)
			}
			a.kind, a.sleep = "sleep", d
		default:
			return nil, fmt.Errorf("%q: unknown action %q (want exit, error or sleep(DURATION))", part, act)
		}
		m[strings.TrimSpace(name)] = a
	}
	return m, nil
}

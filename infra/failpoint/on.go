//go:build failpoints

package failpoint

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

// ErrInjected is returned by a point armed with "error".
var ErrInjected = errors.New("failpoint: injected error")

type action struct {
	mu    sync.Mutex
	skip  int // passes left before acting
	kind  string
	sleep time.Duration
}

var armed = mustParse(os.Getenv("FAILPOINTS"))

// Inject acts on the point called name if FAILPOINTS arms it.
func Inject(name string) error {
	a := armed[name]
	if a == nil {
		return nil
	}
	a.mu.Lock()
	if a.skip > 0 {
		a.skip--
		a.mu.Unlock()
		return nil
	}
	a.mu.Unlock()
	switch a.kind {
	case "exit":
		fmt.Fprintf(os.Stderr, "failpoint %s: exit\n", name)
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // the signal arrives asynchronously; never run the next step
	case "error":
		return fmt.Errorf("%w at %s", ErrInjected, name)
	case "sleep":
		time.Sleep(a.sleep)
	}
	return nil
}

func mustParse(spec string) map[string]*action {
	m, err := Parse(spec)
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAILPOINTS: %v\n", err)
		os.Exit(2)
	}
	return m
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
				return nil, fmt.Errorf("%q: %v", part, err)
			}
			a.kind, a.sleep = "sleep", d
		default:
			return nil, fmt.Errorf("%q: unknown action %q (want exit, error or sleep(DURATION))", part, act)
		}
		m[strings.TrimSpace(name)] = a
	}
	return m, nil
}

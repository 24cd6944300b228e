//go:build failpoints

package failpoint

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// Enabled reports whether this binary was built with failpoints.
const Enabled = true

// ErrInjected is returned by a point armed with "error".
var ErrInjected = errors.New("failpoint: injected error")

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

// Armed reports whether FAILPOINTS arms the point called name: a caller may
// skip the work of reaching a point that nothing arms (the inbox's explicit
// transaction around its one statement).
func Armed(name string) bool { return armed[name] != nil }

// Package proctest runs the module's commands as real processes in tests: it
// builds a binary once per test binary, starts it with an exact environment in
// its own process group, captures its output, learns its listen address from its
// log, and kills it when the test ends. It is an ordinary package so that tests
// of several packages can share it, but only tests import it.
package proctest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
)

var (
	builds sync.Map // pkg + "\x00" + tags -> func() (string, error)

	binMu  sync.Mutex
	binDir string // made on the first build, removed by RemoveBuilds
	binN   int    // numbers the binaries, so two packages named alike never collide
)

// Build returns the path of pkg (a path relative to the module root, such as
// "./cmd/billing") built with the given build tags, building it on the first call
// for that (pkg, tags) in this test binary. A failed build fails t.
func Build(t testing.TB, pkg string, tags ...string) string {
	t.Helper()
	path, err := Binary(pkg, tags...)
	if err != nil {
		t.Fatalf("proctest: %v", err)
	}
	return path
}

// Binary is Build for callers without a testing.TB, such as TestMain. Concurrent
// calls for one (pkg, tags) build once and share the result, error included.
func Binary(pkg string, tags ...string) (string, error) {
	key := pkg + "\x00" + strings.Join(tags, ",")
	f, _ := builds.LoadOrStore(key, sync.OnceValues(func() (string, error) { return build(pkg, tags) }))
	return f.(func() (string, error))()
}

func build(pkg string, tags []string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // only when go is not on PATH: the toolchain that built this test
	}
	binMu.Lock()
	if binDir == "" {
		if binDir, err = os.MkdirTemp("", "proctest-bin-"); err != nil {
			binMu.Unlock()
			return "", err
		}
	}
	binN++
	out := filepath.Join(binDir, filepath.Base(pkg)+"-"+strconv.Itoa(binN))
	binMu.Unlock()

	args := []string{"build", "-o", out}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	cmd := exec.Command(goTool, append(args, pkg)...)
	cmd.Dir = root
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go %s: %w\n%s", strings.Join(cmd.Args[1:], " "), err, msg)
	}
	return out, nil
}

// Run runs the tests and then deletes the binaries they built; a TestMain that
// does nothing else is os.Exit(proctest.Run(m)).
func Run(m *testing.M) int {
	defer RemoveBuilds()
	return m.Run()
}

// RemoveBuilds deletes every binary built so far: a TestMain that uses Build
// calls it (or Run) after m.Run.
func RemoveBuilds() {
	binMu.Lock()
	defer binMu.Unlock()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
}

// ModuleRoot is the nearest directory at or above the working directory that
// holds a go.mod: go test runs a package's tests in the package's directory.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("proctest: no go.mod at or above the working directory")
		}
		dir = parent
	}
}

package e2e

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// previousRelease is the commit whose binaries TestMixedVersions runs beside
// today's: the release a deploy replaces (old replicas still running while new
// ones start) and the one a rollback returns to.
//
// KEEP CURRENT: when a release is deployed, set this to its commit (the
// merge on main that was built and shipped; `git log --first-parent main`).
// Bump it in the same change as the next release's first migration at the
// latest, so the test always runs the release in production beside the code
// about to replace it; run `go test -run TestMixedVersions ./e2e/` after the
// bump (the first run builds it into the cache: its own packages only, about
// 10s of CPU, when TestMain's build filled the cache with the modules). An
// older commit is the rollback floor's business (docs/operations.md,
// "Upgrading"), not this constant's.
const previousRelease = "1766ee0bb4b1574f4c93e8003ef8182daae66817"

// envPreviousRelease, when set, names another commit to run as the previous
// release: how the rollback floor is found (docs/operations.md, "Upgrading").
const envPreviousRelease = "E2E_PREVIOUS_RELEASE"

// The previous release as run: its commit (previousRelease unless
// E2E_PREVIOUS_RELEASE says otherwise) and the paths of its binaries, once
// buildPrevious ran.
var (
	previousCommit      string
	previousLabelingBin string
	previousBillingBin  string
)

// buildPrevious builds the previous release's cmd/labeling and cmd/billing once
// per test binary, reused across runs from the user's cache directory.
var buildPrevious = sync.OnceValue(func() error {
	commit := cmp.Or(os.Getenv(envPreviousRelease), previousRelease)
	if out, err := exec.Command("git", "rev-parse", "--verify", "--quiet", commit+"^{commit}").Output(); err == nil {
		commit = strings.TrimSpace(string(out)) // a short hash or a name, resolved: the cache's key
	}
	dir, err := previousBuild(commit)
	if err != nil {
		return err
	}
	previousCommit = commit
	previousLabelingBin, previousBillingBin = filepath.Join(dir, "labeling"), filepath.Join(dir, "billing")
	return nil
})

// previousBuild returns a directory holding commit's labeling and billing
// binaries, built with the failpoints tag (the harness may arm them like
// today's): ~/.cache/outboxpair-e2e/<commit> (os.UserCacheDir), built there
// from `git archive` of the commit on the first call and reused by every later
// run, since a commit's source never changes. It fails, saying why, when the
// repository's history does not hold the commit (a shallow clone).
func previousBuild(commit string) (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("previous release: no cache directory: %w", err)
	}
	dir := filepath.Join(cache, "outboxpair-e2e", commit)
	if isFile(filepath.Join(dir, "labeling")) && isFile(filepath.Join(dir, "billing")) {
		return dir, nil
	}
	root, err := proctest.ModuleRoot()
	if err != nil {
		return "", err
	}
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		return "", fmt.Errorf("previous release %s is not in this repository's history (%v: %s): "+
			"the mixed-version test builds it from git; fetch the full history (`git fetch --unshallow`, "+
			"or actions/checkout with fetch-depth: 0)", commit, err, strings.TrimSpace(string(out)))
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return "", err
	}
	// Built beside the cache entry and renamed into place, so a run killed
	// mid-build leaves no half entry and two runs at once both end with one.
	tmp, err := os.MkdirTemp(filepath.Dir(dir), commit[:12]+".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	src := filepath.Join(tmp, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.Command("sh", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "sh", root, commit, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("previous release %s: git archive: %w: %s", commit, err, out)
	}
	bin := filepath.Join(tmp, "bin")
	for _, cmd := range []string{"labeling", "billing"} {
		// The flags of TestMain's builds (no -trimpath, which would key every
		// dependency anew): the modules both trees use hit the build cache
		// TestMain just filled, and only this tree's own packages compile (8s
		// of CPU against 98s with -trimpath and a cold cache, measured).
		build := exec.Command("go", "build", "-tags", "failpoints", "-o", filepath.Join(bin, cmd), "./cmd/"+cmd)
		build.Dir = src
		if out, err := build.CombinedOutput(); err != nil {
			return "", fmt.Errorf("previous release %s: go build ./cmd/%s: %w\n%s", commit, cmd, err, out)
		}
	}
	// Another run may have renamed its build into place first: it is the same.
	if err := os.Rename(bin, dir); err != nil && !isFile(filepath.Join(dir, "billing")) {
		return "", err
	}
	return dir, nil
}

func isFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// TestPreviousBuildNamesMissingHistory: a commit the clone does not hold (a
// shallow CI checkout) fails the build with what to do, not with git's words
// alone.
func TestPreviousBuildNamesMissingHistory(t *testing.T) {
	t.Parallel()
	_, err := previousBuild("00000000000000000000000000000000deadbeef")
	require.ErrorContains(t, err, "is not in this repository's history")
	require.ErrorContains(t, err, "fetch-depth: 0")
}

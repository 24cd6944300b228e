package deploy

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// testSupport is the folder of the packages only tests import.
const testSupport = "github.com/acme/outboxpair/internal/testsupport/"

// goList runs `go list` in the module root and returns its output lines.
func goList(t *testing.T, args ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "go list %s: %s", strings.Join(args, " "), stderr.String())
	return strings.Fields(string(out))
}

// Test support must stay out of what ships: no package built without its tests
// (in the normal build or in the failpoints build the crash tests use) may depend
// on a package under internal/testsupport, directly or through another package.
func TestTestSupportStaysInTests(t *testing.T) {
	t.Parallel()
	for _, tags := range []string{"", "failpoints"} {
		checked := 0
		// Deps is every package the package's build (not its tests) needs.
		for _, line := range goList(t, "-tags", tags, "-f", `{{.ImportPath}}{{range .Deps}},{{.}}{{end}}`, "./...") {
			fields := strings.Split(line, ",")
			if strings.HasPrefix(fields[0], testSupport) {
				continue
			}
			checked++
			for _, dep := range fields[1:] {
				require.False(t, strings.HasPrefix(dep, testSupport),
					"%s (tags %q) depends on the test-support package %s: runtime code must not import test support",
					fields[0], tags, dep)
			}
		}
		require.Greater(t, checked, 10, "go list listed too few packages")
	}
}

// A helper only one package uses belongs in that package's _test.go files: every
// test-support package is imported by the tests of at least two other packages.
func TestTestSupportIsShared(t *testing.T) {
	t.Parallel()
	importers := map[string][]string{}
	for _, line := range goList(t, "-f",
		`{{.ImportPath}}{{range .TestImports}},{{.}}{{end}}{{range .XTestImports}},{{.}}{{end}}`, "./...") {
		fields := strings.Split(line, ",")
		for _, imp := range fields[1:] {
			if strings.HasPrefix(imp, testSupport) && imp != fields[0] && !strings.HasPrefix(fields[0], imp+"/") {
				importers[imp] = append(importers[imp], fields[0])
			}
		}
	}
	for _, pkg := range goList(t, "./internal/testsupport/...") {
		seen := map[string]bool{}
		for _, p := range importers[pkg] {
			seen[p] = true
		}
		require.GreaterOrEqual(t, len(seen), 2,
			"%s is used by the tests of %v only: move it into that package's _test.go files", pkg, importers[pkg])
	}
}

// workflowRuns is the run: scripts of each job's steps of the GitHub
// workflow, in order, by job.
func workflowRuns(t *testing.T) map[string][]string {
	t.Helper()
	var wf struct {
		Jobs map[string]struct {
			Steps []struct {
				Run string `yaml:"run"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(read(t, ".github/workflows/ci.yml")), &wf))
	out := map[string][]string{}
	for name, job := range wf.Jobs {
		for _, s := range job.Steps {
			out[name] = append(out[name], s.Run)
		}
	}
	return out
}

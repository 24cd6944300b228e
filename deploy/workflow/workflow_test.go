// Package workflow checks .github/workflows/ci.yml with actionlint, as a library.
package workflow

import (
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/rhysd/actionlint"
	"github.com/stretchr/testify/require"
)

// root is the repository root: go test runs in deploy/workflow.
const root = "../.."

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, path))
	require.NoError(t, err)
	return string(b)
}

// shellCommands joins continuation lines and collapses blanks, so that two
// spellings of one command compare equal.
func shellCommands(script string) []string {
	var out []string
	var cur strings.Builder
	for _, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if cont, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		if s := strings.Join(strings.Fields(cur.String()), " "); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	return out
}

// section returns the README's text from the heading "## name" to the next one.
func section(t *testing.T, readme, name string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "\n## "+name+"\n")
	require.True(t, ok, "README has a section %q", name)
	if i := strings.Index(rest, "\n## "); i >= 0 {
		rest = rest[:i]
	}
	return rest
}

var shBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

// readmeTestCommand is the one command of the README's "Running the tests".
func readmeTestCommand(t *testing.T) string {
	t.Helper()
	m := shBlock.FindStringSubmatch(section(t, read(t, "README.md"), "Running the tests"))
	require.NotNil(t, m)
	cmds := shellCommands(m[1])
	require.Len(t, cmds, 1)
	require.Contains(t, cmds[0], "go test ")
	return cmds[0]
}

func TestCIWorkflow(t *testing.T) {
	t.Parallel()
	const path = ".github/workflows/ci.yml"

	t.Run("actionlint finds nothing", func(t *testing.T) {
		t.Parallel()
		linter, err := actionlint.NewLinter(io.Discard, &actionlint.LinterOptions{})
		require.NoError(t, err)
		errs, err := linter.LintFile(filepath.Join(root, path), nil)
		require.NoError(t, err)
		for _, e := range errs {
			t.Errorf("%s:%d:%d: %s [%s]", path, e.Line, e.Column, e.Message, e.Kind)
		}
	})

	t.Run("the test job runs the README's test command against a PostgreSQL service", func(t *testing.T) {
		t.Parallel()
		wf, errs := actionlint.Parse([]byte(read(t, path)))
		require.Empty(t, errs)
		job := wf.Jobs["test"]
		require.NotNil(t, job)
		pg := job.Services.Value["postgres"]
		require.NotNil(t, pg, "a postgres service container")
		require.Contains(t, pg.Container.Image.Value, "postgres:")
		var ports []string
		for _, p := range pg.Container.Ports {
			ports = append(ports, p.Value)
		}
		require.Contains(t, ports, "5432:5432", "published where TEST_DATABASE_URL points")

		var runs []string
		for _, s := range job.Steps {
			if r, ok := s.Exec.(*actionlint.ExecRun); ok {
				runs = append(runs, shellCommands(r.Run.Value)...)
			}
		}
		require.Contains(t, runs, readmeTestCommand(t))
		require.Contains(t, runs, "go vet ./...")
		require.Contains(t, runs, "go vet -tags failpoints ./...")
		require.Contains(t, strings.Join(runs, "\n"), "golangci-lint")
	})

	t.Run("the smoke job runs deploy/smoke.sh", func(t *testing.T) {
		t.Parallel()
		wf, errs := actionlint.Parse([]byte(read(t, path)))
		require.Empty(t, errs)
		job := wf.Jobs["smoke"]
		require.NotNil(t, job)
		require.Contains(t, job.RunsOn.Labels[0].Value, "ubuntu", "a runner with Docker")
		var runs []string
		for _, s := range job.Steps {
			if r, ok := s.Exec.(*actionlint.ExecRun); ok {
				runs = append(runs, shellCommands(r.Run.Value)...)
			}
		}
		require.Contains(t, runs, "deploy/smoke.sh")
	})
}

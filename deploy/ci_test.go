package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

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

// quickStartSteps are the commands of the README's Quick start after
// `docker compose up` (which smoke.sh runs detached, under its own project).
func quickStartSteps(t *testing.T) []string {
	t.Helper()
	var steps []string
	for _, m := range shBlock.FindAllStringSubmatch(section(t, read(t, "README.md"), "Quick start"), -1) {
		for _, c := range shellCommands(m[1]) {
			if !strings.HasPrefix(c, "#") && !strings.HasPrefix(c, "docker compose ") {
				steps = append(steps, c)
			}
		}
	}
	return steps
}

// TestCIWorkflow checks .github/workflows/ci.yml: actionlint finds nothing (in
// deploy/workflow, a module of its own: see its go.mod), the test job runs the
// README's test command, vet and lint against a PostgreSQL service, and the smoke
// job runs deploy/smoke.sh on a runner with Docker.
func TestCIWorkflow(t *testing.T) {
	t.Parallel()

	t.Run("actionlint finds nothing", func(t *testing.T) {
		t.Parallel()
		cmd := exec.Command("go", "test", "-count=1", "./...")
		cmd.Dir = filepath.Join(root, "deploy", "workflow")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	})

	var wf struct {
		Jobs map[string]struct {
			RunsOn   string `yaml:"runs-on"`
			Services map[string]struct {
				Image string   `yaml:"image"`
				Ports []string `yaml:"ports"`
			} `yaml:"services"`
			Steps []struct {
				Run  string         `yaml:"run"`
				Uses string         `yaml:"uses"`
				With map[string]any `yaml:"with"`
			} `yaml:"steps"`
		} `yaml:"jobs"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(read(t, ".github/workflows/ci.yml")), &wf))
	runs := func(job string) []string {
		var out []string
		for _, s := range wf.Jobs[job].Steps {
			out = append(out, shellCommands(s.Run)...)
		}
		return out
	}

	t.Run("the test job runs the README's test command, vet and lint against a PostgreSQL service", func(t *testing.T) {
		t.Parallel()
		pg, ok := wf.Jobs["test"].Services["postgres"]
		require.True(t, ok, "a postgres service container")
		require.Equal(t, setup(t).project.Services["postgres"].Image, pg.Image,
			"CI tests against the PostgreSQL docker-compose.yml runs, exactly (TestImages pins that one)")
		require.Contains(t, pg.Ports, "5432:5432", "published where TEST_DATABASE_URL points")
		cmds := runs("test")
		require.Contains(t, cmds, readmeTestCommand(t))
		require.Contains(t, cmds, "go vet ./...")
		require.Contains(t, cmds, "go vet -tags failpoints ./...")
		require.Contains(t, strings.Join(cmds, "\n"), "golangci-lint")
	})

	t.Run("the test job checks out the whole history, which the mixed-version test builds the previous release from", func(t *testing.T) {
		t.Parallel()
		// e2e's TestMixedVersions runs `git archive` of previousRelease: a
		// shallow clone (checkout's default depth 1) does not hold it.
		var depths []any
		for _, s := range wf.Jobs["test"].Steps {
			if strings.HasPrefix(s.Uses, "actions/checkout@") {
				depths = append(depths, s.With["fetch-depth"])
			}
		}
		require.Equal(t, []any{0}, depths, "one checkout, with fetch-depth: 0")
	})

	t.Run("the smoke job runs deploy/smoke.sh on a runner with Docker", func(t *testing.T) {
		t.Parallel()
		require.Contains(t, wf.Jobs["smoke"].RunsOn, "ubuntu")
		require.Contains(t, runs("smoke"), "deploy/smoke.sh")
	})
}

func TestCIRun(t *testing.T) {
	t.Parallel()
	script := read(t, ".ci/run")
	readme := readmeTestCommand(t)
	url, command, ok := strings.Cut(readme, " go test ")
	require.True(t, ok)
	command = "go test " + command

	cmds := shellCommands(script)
	require.Contains(t, cmds, "export "+url, ".ci/run points the tests where the README does")
	found := false
	for _, c := range cmds {
		found = found || strings.HasPrefix(c, command+" ") || c == command
	}
	require.True(t, found, ".ci/run runs the README's test command %q", command)
	lint := regexp.MustCompile(`golangci-lint/v2/cmd/golangci-lint@v[0-9.]+`)
	pinned := lint.FindString(script)
	require.NotEmpty(t, pinned, "lint comes through the Go module proxy")
	require.Equal(t, []string{pinned}, lint.FindAllString(read(t, ".github/workflows/ci.yml"), -1),
		"the workflow lints with the same version")
}

func TestSmokeScript(t *testing.T) {
	t.Parallel()
	const path = "deploy/smoke.sh"

	t.Run("is valid bash", func(t *testing.T) {
		t.Parallel()
		out, err := exec.Command("bash", "-n", filepath.Join(root, path)).CombinedOutput()
		require.NoError(t, err, "%s", out)
	})

	t.Run("runs every step of the README's Quick start, verbatim", func(t *testing.T) {
		t.Parallel()
		script := shellCommands(read(t, path))
		steps := quickStartSteps(t)
		require.Len(t, steps, 2, "the Quick start's steps: the token, then the walk-through with it")
		require.Contains(t, steps[1], "bash "+walkthroughScript, "the Quick start walks docs/walkthrough.sh, the script the README shows")
		for _, step := range steps {
			require.Contains(t, script, step)
		}
	})

	t.Run("brings the stack up waiting for health and always takes it down with its volumes", func(t *testing.T) {
		t.Parallel()
		cmds := shellCommands(read(t, path))
		for _, want := range []string{
			"docker compose -p " + smokeProject + " up -d --build --wait",
			"docker compose -p " + smokeProject + " down -v",
			"trap cleanup EXIT",
			"set -euo pipefail",
		} {
			require.True(t, slices.Contains(cmds, want), "%s must run %q", path, want)
		}
	})

	t.Run("every compose call runs under a project of its own, so its down -v never wipes the user's volumes", func(t *testing.T) {
		t.Parallel()
		require.NotEqual(t, setup(t).project.Name, smokeProject, "the smoke project must not be the compose file's own")
		calls := 0
		for _, c := range shellCommands(read(t, path)) {
			if strings.HasPrefix(c, "#") {
				continue
			}
			for _, m := range composeCall.FindAllStringSubmatch(c, -1) {
				calls++
				require.Equal(t, smokeProject, m[1], "%s: name the project (-p %s) in every compose call", c, smokeProject)
			}
		}
		require.GreaterOrEqual(t, calls, 3, "up, logs and down")
		require.NotContains(t, read(t, path), "COMPOSE_PROJECT_NAME", "-p in each call, where a reader sees it")
	})

	t.Run("waits for the token issuer, which has no health check, before the token step", func(t *testing.T) {
		t.Parallel()
		script := read(t, path)
		alive, token := strings.Index(script, "localhost:8090/isalive"), strings.Index(script, "localhost:8090/outboxpair/token")
		require.GreaterOrEqual(t, alive, 0, "the script polls the issuer's /isalive")
		require.Less(t, alive, token, "before it asks for a token")
	})
}

// smokeProject is the compose project deploy/smoke.sh runs under.
const smokeProject = "outboxpair-smoke"

// composeCall finds a compose invocation and the project it names with -p or
// --project-name right after "compose" ("" when it names none).
var composeCall = regexp.MustCompile(`docker[ -]compose\b(?:\s+(?:-p|--project-name)[ =](\S+))?`)

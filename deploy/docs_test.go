package deploy

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// The documents: the landing page and one page per concern.
func docFiles(t *testing.T) []string {
	t.Helper()
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, pages)
	files := []string{"README.md"}
	for _, p := range pages {
		files = append(files, filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator))))
	}
	return files
}

type fenced struct {
	lang, body string
	line       int // of the opening fence
}

// fencedBlocks returns the fenced code blocks of a Markdown text.
func fencedBlocks(text string) []fenced {
	var out []fenced
	var cur *fenced
	for i, line := range strings.Split(text, "\n") {
		switch {
		case cur == nil && strings.HasPrefix(line, "```"):
			cur = &fenced{lang: strings.TrimPrefix(line, "```"), line: i + 1}
		case cur != nil && line == "```":
			out = append(out, *cur)
			cur = nil
		case cur != nil:
			cur.body += line + "\n"
		}
	}
	return out
}

// splitComment cuts a shell command at its comment: a # that starts a word
// outside quotes.
func splitComment(c string) (cmd, comment string) {
	var quote rune
	for i, r := range c {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && (i == 0 || c[i-1] == ' '):
			return strings.TrimSpace(c[:i]), strings.TrimSpace(c[i+1:])
		}
	}
	return c, ""
}

// ranCommands are the command lines of the scripts that really run, each with
// what runs it: a command of the docs found here runs as written.
func ranCommands(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	add := func(script, by string) {
		for _, c := range shellCommands(script) {
			if c, _ := splitComment(c); c != "" {
				out[c] = by
			}
		}
	}
	add(read(t, walkthroughScript), "TestWalkthrough")
	out["bash "+walkthroughScript] = "TestWalkthrough" // from the root, as the test runs it
	for _, r := range docRecipes(t) {
		add(r.script, ranByRecipes)
	}
	add(read(t, ".ci/run"), ".ci/run")
	add(read(t, "deploy/smoke.sh"), "deploy/smoke.sh, in the GitHub workflow")
	for _, runs := range workflowRuns(t) {
		for _, run := range runs {
			add(run, "the GitHub workflow")
		}
	}
	return out
}

// ranByRecipes is what runs the recipes' commands: the whole block, verbatim.
const ranByRecipes = "TestRecipes"

// ranInside says whether cmd runs as a command substitution, $(cmd), in a
// line that runs (a script that checks a step's answer captures it so).
func ranInside(ran map[string]string, cmd string) bool {
	for line := range ran {
		if strings.Contains(line, "$("+cmd+")") {
			return true
		}
	}
	return false
}

// needsDocker is why the Docker path's commands go unrun here: this machine has
// no Docker engine, GitHub's runners do.
const needsDocker = "needs Docker: run by deploy/smoke.sh in the GitHub workflow"

// unrunCommands are the commands of the docs that no test or script here runs
// as written, each with the reason: they need Docker, or they would take a
// fixed port, and a test runs their equivalent instead. Keep it short: every
// entry is a command that can drift.
var unrunCommands = map[string]string{
	"docker compose up": needsDocker,
	// The stand-in provider on its fixed port 8082 and ./data: cmd/provider's
	// TestStandIn starts the same binary with the same kind of secret on a
	// free port.
	"PROVIDER_SECRET=whsec_ZGV2LXByb3ZpZGVyLXNlY3JldC1jaGFuZ2UtbWUhISE= go run ./cmd/provider": "fixed port 8082 and ./data: cmd/provider's TestStandIn",
}

// docCommand is one command line of a ```sh or ```bash block of the docs.
type docCommand struct {
	where, cmd, comment string
	// built: the page shows a `go build -o bin/ ./cmd/...` step, after which
	// bin/labeling and bin/billing run.
	built bool
}

// builtStep is the build step a page shows once before running bin/labeling or
// bin/billing.
var builtStep = regexp.MustCompile(`(?m)^go build -o bin/ \./cmd/\.\.\.\s*(#.*)?$`)

// binaryCommand reads a labeling or billing command of the docs, as a reader on
// the page's path types it: `go run ./cmd/NAME ARGS` from the repository root,
// or `bin/NAME ARGS` on a page that shows the build step. A bare `NAME ARGS`
// is bare: no fresh clone has it on PATH, so it is reported, never run.
func binaryCommand(c docCommand, args []string) (name string, argv []string, bare, ok bool) {
	switch {
	case len(args) >= 3 && args[0] == "go" && args[1] == "run" && (args[2] == "./cmd/labeling" || args[2] == "./cmd/billing"):
		return strings.TrimPrefix(args[2], "./cmd/"), args[3:], false, true
	case len(args) > 0 && c.built && (args[0] == "bin/labeling" || args[0] == "bin/billing"):
		return strings.TrimPrefix(args[0], "bin/"), args[1:], false, true
	case len(args) > 0 && (args[0] == "labeling" || args[0] == "billing" || args[0] == "bin/labeling" || args[0] == "bin/billing"):
		return "", nil, true, false
	}
	return "", nil, false, false
}

func docCommands(t *testing.T) []docCommand {
	t.Helper()
	var out []docCommand
	for _, file := range docFiles(t) {
		blocks := fencedBlocks(read(t, file))
		built := false
		for _, b := range blocks {
			if (b.lang == "sh" || b.lang == "bash") && builtStep.MatchString(b.body) {
				built = true
			}
		}
		for _, b := range blocks {
			if b.lang != "sh" && b.lang != "bash" {
				continue
			}
			for _, c := range shellCommands(b.body) {
				cmd, comment := splitComment(c)
				if cmd != "" {
					out = append(out, docCommand{fmt.Sprintf("%s (block at line %d)", file, b.line), cmd, comment, built})
				}
			}
		}
	}
	return out
}

var assignment = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=\S*$`)

// words splits a command into its leading VAR=value assignments and the rest.
func words(cmd string) (env map[string]string, args []string) {
	env = map[string]string{}
	fields := strings.Fields(cmd)
	for len(fields) > 0 && assignment.MatchString(fields[0]) {
		k, v, _ := strings.Cut(fields[0], "=")
		env[k] = strings.Trim(v, `'`)
		fields = fields[1:]
	}
	return env, fields
}

// Every command in a ```sh or ```bash block of README.md and docs/ is run as
// written by a script or test: a line of the walk-through, .ci/run,
// deploy/smoke.sh, the workflow or a recipe (TestRecipes); a go test
// invocation whose packages and tests exist; or a labeling or billing command as a fresh clone runs it
// (`go run ./cmd/labeling …`, or `bin/labeling …` after the page's build step),
// which TestDocsBinaryCommands runs. The few that cannot run here are in
// unrunCommands with the reason. A new command in the docs that none of these
// covers fails this test, and so does a bare `labeling …`, which no fresh clone
// has on its PATH (issue 26).
func TestDocsCommands(t *testing.T) {
	t.Parallel()
	ran := ranCommands(t)
	used := map[string]bool{}
	for _, c := range docCommands(t) {
		_, args := words(c.cmd)
		_, _, bare, binary := binaryCommand(c, args)
		switch {
		case bare:
			t.Errorf("%s: %q fails from a fresh clone (command not found): write `go run ./cmd/%s …`, or show `go build -o bin/ ./cmd/...` once on the page and write `bin/…`",
				c.where, c.cmd, strings.TrimPrefix(args[0], "bin/"))
		case ran[c.cmd] != "" || ranInside(ran, c.cmd):
		case len(args) > 1 && args[0] == "go" && args[1] == "test":
			checkGoTest(t, c.where, args[2:])
		case binary:
			// TestDocsBinaryCommands runs it.
		case unrunCommands[c.cmd] != "":
			used[c.cmd] = true
		default:
			t.Errorf("%s: no test or script runs %q: add it to one (the walk-through, .ci/run), or, if it cannot run here, to unrunCommands with the reason", c.where, c.cmd)
		}
	}
	for cmd := range unrunCommands {
		require.True(t, used[cmd], "unrunCommands lists %q, which no page shows any more: remove it", cmd)
	}
}

// checkGoTest requires the packages of a go test command to hold tests, and its
// -run and -bench patterns to name some of them.
func checkGoTest(t *testing.T, where string, args []string) {
	t.Helper()
	patterns := map[string]string{}
	var pkgs []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		switch {
		case !strings.HasPrefix(a, "-"):
			pkgs = append(pkgs, a)
		case slices.Contains([]string{"run", "bench", "count", "timeout", "tags", "p", "parallel", "benchtime"}, name):
			if !hasValue {
				i++
				require.Less(t, i, len(args), "%s: %s needs a value", where, a)
				value = args[i]
			}
			patterns[name] = strings.Trim(value, `'"`)
		}
	}
	require.NotEmpty(t, pkgs, "%s: go test names its packages", where)
	var sources strings.Builder
	for _, pkg := range pkgs {
		dir, recursive := strings.CutSuffix(pkg, "/...")
		files, err := filepath.Glob(filepath.Join(root, dir, "*_test.go"))
		require.NoError(t, err)
		require.True(t, recursive || len(files) > 0, "%s: %s has no tests", where, pkg)
		for _, f := range files {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			sources.Write(b)
		}
	}
	for flag, kind := range map[string]string{"run": "Test", "bench": "Benchmark"} {
		p, ok := patterns[flag]
		if !ok || p == "^$" {
			continue
		}
		// go test matches the first element of a -run pattern against the
		// top-level tests; the rest names subtests, which this does not check.
		first, _, _ := strings.Cut(p, "/")
		re, err := regexp.Compile(first)
		require.NoError(t, err, "%s: -%s %q", where, flag, p)
		var names []string
		for _, m := range regexp.MustCompile(`(?m)^func (`+kind+`\w*)\(`).FindAllStringSubmatch(sources.String(), -1) {
			if re.MatchString(m[1]) {
				names = append(names, m[1])
			}
		}
		require.NotEmpty(t, names, "%s: -%s %q matches no %s function of %v", where, flag, p, kind, pkgs)
	}
}

// docPlaceholders stand in the docs for values a reader supplies: the test
// puts in its own. A NATS URL becomes a closed port, so a broker that happens
// to run on the machine is never touched (neither service needs NATS to start).
var docPlaceholders = map[string]func() string{
	"ID...":                 func() string { return uuid.NewString() },
	"nats://127.0.0.1:4222": func() string { return "nats://127.0.0.1:1" },
}

// printsClaim is a comment's claim about a command's output: prints "requeued
// N of M rows", where N and M stand for numbers.
var printsClaim = regexp.MustCompile(`prints "([^"]+)"`)

// TestDocsBinaryCommands runs every labeling and billing command of the docs'
// shell blocks against the real binaries, on a fresh SQLite file each: a
// command exits 0 (serve: becomes ready, then exits 0 on SIGTERM), and a
// comment that says what it prints is held to its output.
func TestDocsBinaryCommands(t *testing.T) {
	t.Parallel()
	bins := builtBinaries(t)
	ran := 0
	recipes := ranCommands(t)
	for _, c := range docCommands(t) {
		assigns, words := words(c.cmd)
		name, args, _, ok := binaryCommand(c, words)
		if !ok || recipes[c.cmd] == ranByRecipes {
			continue // a recipe's line runs in its recipe, which TestRecipes runs whole
		}
		ran++
		t.Run(c.cmd, func(t *testing.T) {
			t.Parallel()
			argv := slices.Clone(args)
			serve := len(argv) > 0 && argv[0] == "serve"
			// An operator command gets DATABASE_URL alone, as operations.md says
			// it needs; serve also what the walk-through's pair has.
			env := map[string]string{"DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), name+".db")}
			if serve {
				env["EVENTS_TOKEN"] = "docs-test"
				env["AUTH_DISABLED"] = "true"
				env["HTTP_ADDR"] = "127.0.0.1:0"
				env["BILLING_URL"] = "http://127.0.0.1:1" // never a billing that may run on :8081
			}
			for k, v := range assigns {
				if f, ok := docPlaceholders[v]; ok {
					v = f()
				}
				env[k] = v
			}
			for i, a := range argv {
				if f, ok := docPlaceholders[a]; ok {
					argv[i] = f()
				}
			}
			if !serve {
				// An operator command works on the service's database, which
				// serve (or migrate) has migrated.
				m := proctest.Start(t, bins[name], env, "migrate")
				require.Equal(t, 0, m.Wait(t, time.Minute).ExitCode(), "%s migrate", name)
			}
			p := proctest.Start(t, bins[name], env, argv...)
			if serve {
				base := "http://" + p.ListenAddr(t)
				client := &http.Client{Timeout: 5 * time.Second}
				require.Eventually(t, func() bool {
					resp, err := client.Get(base + "/readyz")
					if err != nil {
						return false
					}
					resp.Body.Close()
					return resp.StatusCode == http.StatusOK
				}, time.Minute, 50*time.Millisecond, "%s: %s never became ready", c.where, c.cmd)
				p.Signal(t, syscall.SIGTERM)
			}
			require.Equal(t, 0, p.Wait(t, time.Minute).ExitCode(), "%s: %s", c.where, c.cmd)
			if m := printsClaim.FindStringSubmatch(c.comment); m != nil {
				want := "^" + strings.NewReplacer("N", `\d+`, "M", `\d+`).Replace(regexp.QuoteMeta(m[1])) + "\n$"
				require.Regexp(t, want, p.Stdout.String(), "%s: %s prints what its comment says", c.where, c.cmd)
			}
		})
	}
	require.Greater(t, ran, 3, "the docs show the operator commands (operations.md, nats.md)")
}

// link is [text](target) in Markdown, outside code.
var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// headingSlugs are the anchors GitHub makes of a Markdown file's headings.
func headingSlugs(text string) map[string]bool {
	slugs := map[string]bool{}
	inFence := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		}
		if inFence || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.ToLower(strings.TrimSpace(strings.TrimLeft(line, "#")))
		h = regexp.MustCompile(`[^\p{L}\p{N} _-]`).ReplaceAllString(h, "")
		slugs[strings.ReplaceAll(h, " ", "-")] = true
	}
	return slugs
}

// Every relative link of README.md, docs/ and the package READMEs resolves: the
// file exists and, for #anchor, has that heading. Every page of docs/ is
// linked from the README, and starts, under its title, with the sentence that
// says which question it answers.
func TestDocsLinks(t *testing.T) {
	t.Parallel()
	files := append(docFiles(t), "e2e/README.md", "internal/testsupport/README.md", "CONTRACT.md", "BENCHMARKS.md")
	readmeLinks := map[string]bool{}
	for _, file := range files {
		text := read(t, file)
		var prose strings.Builder // links inside fenced blocks are code
		inFence := false
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, "```") {
				inFence = !inFence
			}
			if !inFence {
				prose.WriteString(line + "\n")
			}
		}
		for _, m := range link.FindAllStringSubmatch(prose.String(), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			resolved := file
			if path != "" {
				resolved = filepath.ToSlash(filepath.Join(filepath.Dir(file), path))
			}
			if file == "README.md" {
				readmeLinks[resolved] = true
			}
			_, err := os.Stat(filepath.Join(root, resolved))
			require.NoError(t, err, "%s links to %s, which does not exist", file, target)
			if anchor != "" {
				require.True(t, headingSlugs(read(t, resolved))[anchor], "%s links to %s: %s has no heading #%s", file, target, resolved, anchor)
			}
		}
	}
	for _, file := range docFiles(t)[1:] {
		require.True(t, readmeLinks[file], "README.md does not link to %s", file)
		lines := strings.SplitN(read(t, file), "\n", 4)
		require.True(t, strings.HasPrefix(lines[0], "# ") && lines[1] == "" && lines[2] != "" && !strings.HasPrefix(lines[2], "#"),
			"%s starts with its title, a blank line, then the sentence that says which question it answers", file)
	}
	// The README's map of the docs lists each page once (the old table of
	// contents listed Tracing twice).
	seen := map[string]bool{}
	for _, m := range link.FindAllStringSubmatch(section(t, read(t, "README.md"), "Documentation"), -1) {
		require.False(t, seen[m[1]], "README.md's Documentation lists %s twice", m[1])
		seen[m[1]] = true
	}
	for _, file := range docFiles(t)[1:] {
		require.True(t, seen[file], "README.md's Documentation does not list %s", file)
	}
}

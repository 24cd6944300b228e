package deploy

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// recipe is a shell block of the docs that a reader runs as written: the
// comment <!-- recipe: NAME … --> on the line above its fence marks it, and
// TestRecipes runs it verbatim.
type recipe struct{ name, file, script string }

var recipeMarker = regexp.MustCompile("(?s)<!-- recipe: ([a-z-]+)[^>]*-->\n```sh\n(.*?)```\n")

// recipeFiles says where each recipe lives, in the order TestRecipes runs
// them: the README's needs nothing but Go, the others a PostgreSQL server and
// a nats-server.
var recipeFiles = []struct{ name, file string }{
	{"no-install", "README.md"},
	{"postgresql", "docs/sqlite-postgres.md"},
	{"nats", "docs/nats.md"},
}

// docRecipes returns every recipe of README.md and docs/.
func docRecipes(t *testing.T) []recipe {
	t.Helper()
	var out []recipe
	for _, file := range docFiles(t) {
		for _, m := range recipeMarker.FindAllStringSubmatch(read(t, file), -1) {
			out = append(out, recipe{name: m[1], file: file, script: m[2]})
		}
	}
	return out
}

// docRecipe returns the recipe called name, failing t unless exactly one is.
func docRecipe(t *testing.T, name string) recipe {
	t.Helper()
	var found []recipe
	for _, r := range docRecipes(t) {
		if r.name == name {
			found = append(found, r)
		}
	}
	require.Len(t, found, 1, "the docs show the recipe %q once, marked <!-- recipe: %s -->", name, name)
	return found[0]
}

// Each recipe is where the README's map says, once, and has the shape
// TestRecipes relies on: it builds the binaries once, runs the walk-through
// naming its logs, and stops every job it started.
func TestDocsRecipes(t *testing.T) {
	t.Parallel()
	var names []string
	for _, r := range docRecipes(t) {
		names = append(names, r.name)
	}
	var want []string
	for _, rf := range recipeFiles {
		want = append(want, rf.name)
		r := docRecipe(t, rf.name)
		require.Equal(t, rf.file, r.file, "the %s recipe's page", rf.name)
		cmds := shellCommands(r.script)
		require.Equal(t, "go build -o bin/ ./cmd/...", cmds[0], "%s: the recipe builds once, first", r.file)
		require.Equal(t, "kill $(jobs -p)", cmds[len(cmds)-1], "%s: the recipe ends by stopping what it started", r.file)
		walks := slices.IndexFunc(cmds, func(c string) bool { return strings.HasPrefix(c, "bash "+walkthroughScript+" ") })
		require.GreaterOrEqual(t, walks, 0, "%s: the recipe runs the walk-through, naming its logs", r.file)
		for _, log := range strings.Fields(strings.TrimPrefix(cmds[walks], "bash "+walkthroughScript)) {
			require.Contains(t, r.script, "> "+log+" 2>&1 &", "%s: the walk-through names %s, which the recipe writes", r.file, log)
		}
	}
	require.ElementsMatch(t, want, names, "the recipes of the docs")
}

// TestRecipes runs each recipe of the docs with bash, verbatim, from the root
// of a copy of the repository (tracked and untracked files, without what
// .gitignore names), as a reader runs it from a fresh clone: the no-install
// recipe, then PostgreSQL against a throwaway cluster of its own, then NATS
// against the nats-server the e2e suite runs. Each must end with
// `walkthrough: ok`, and its last step must stop every process it started.
// The recipes share the copy, so the first one's build compiles and the
// others' find the build cache warm, as a reader trying one after another.
//
// The test gives them only variables they honour: free ports for the
// *_PORT variables, PGPORT (read by createdb and the services alike), and a
// PATH whose nats-server is $NATS_SERVER_BIN or the installed one. A missing
// tool fails it.
func TestRecipes(t *testing.T) {
	t.Parallel()
	bash := tools(t, "bash")
	tools(t, "go")
	tools(t, "createdb")
	natsDir := t.TempDir()
	require.NoError(t, os.Symlink(natsServerBinary(t), filepath.Join(natsDir, "nats-server")))

	copied := time.Now()
	clone := copyRepository(t)
	for _, rf := range recipeFiles {
		r := docRecipe(t, rf.name)
		if !t.Run(r.name, func(t *testing.T) {
			env := recipeEnv(t, natsDir)
			if r.name == "postgresql" {
				env["PGPORT"] = strconv.Itoa(throwawayPostgres(t))
			}
			script := filepath.Join(t.TempDir(), r.name+".sh")
			require.NoError(t, os.WriteFile(script, []byte(r.script), 0o600))

			began := time.Now()
			// -e: a step that fails stops the recipe there, as a reader
			// would stop at an error, instead of running the next.
			p := proctest.StartIn(t, clone, bash, env, "-e", script)
			state := p.Wait(t, 15*time.Minute)
			if !state.Success() || !strings.HasSuffix(p.Stdout.String(), "walkthrough: ok\n") {
				logTails(t, clone)
				t.Fatalf("%s: the %s recipe did not end with walkthrough: ok (%s):\n%s", r.file, r.name, state, p.Output.String())
			}
			t.Logf("%s: walkthrough: ok %s after the recipe began, %s after the copy of the repository",
				r.name, time.Since(began).Round(time.Second), time.Since(copied).Round(time.Second))
			requireGroupGone(t, p.Pid(), time.Minute)
		}) {
			return // the next recipe would stumble on what this one left
		}
	}
}

// recipeEnv is the environment of a recipe: the test's PATH (nats-server first
// from natsDir), HOME and Go's variables, and free ports for the recipe's
// *_PORT variables. Nothing else of the test's environment reaches it, so a
// DATABASE_URL or EVENTS_TRANSPORT set where the tests run changes nothing.
func recipeEnv(t *testing.T, natsDir string) map[string]string {
	t.Helper()
	env := map[string]string{"PATH": natsDir + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		if k == "HOME" || k == "TMPDIR" || k == "USER" || k == "LANG" || k == "XDG_CACHE_HOME" || strings.HasPrefix(k, "GO") {
			env[k] = v
		}
	}
	seen := map[int]bool{}
	for _, name := range []string{"LABELING_PORT", "BILLING_PORT", "PROVIDER_PORT", "NATS_PORT"} {
		for {
			port, err := pgtest.FreePort()
			require.NoError(t, err)
			if !seen[port] {
				seen[port] = true
				env[name] = strconv.Itoa(port)
				break
			}
		}
	}
	return env
}

// natsServerBinary is the nats-server the e2e suite runs: $NATS_SERVER_BIN,
// else nats-server on PATH or Debian's, else one built from the module's own
// github.com/nats-io/nats-server/v2 (the version go.mod pins; what a runner
// without one gets, as .ci/run builds it).
func natsServerBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("NATS_SERVER_BIN"); p != "" {
		return p
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server"
	}
	return proctest.Build(t, "github.com/nats-io/nats-server/v2")
}

// copyRepository copies what a clone of the repository holds (tracked files
// and untracked ones .gitignore does not name, as they are in the working
// tree) into a new directory, so the recipes' bin/, data/ and logs land
// there.
func copyRepository(t *testing.T) string {
	t.Helper()
	cmd := exec.Command(tools(t, "git"), "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	require.NoError(t, err, "git ls-files")
	dst := t.TempDir()
	for _, name := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		info, err := os.Lstat(src)
		if err != nil {
			continue // deleted in the working tree
		}
		target := filepath.Join(dst, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(target), 0o755))
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			link, err := os.Readlink(src)
			require.NoError(t, err)
			require.NoError(t, os.Symlink(link, target))
		case info.Mode().IsRegular():
			b, err := os.ReadFile(src)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(target, b, info.Mode().Perm()))
		}
	}
	return dst
}

// throwawayPostgres starts a PostgreSQL cluster of the test's own (trust
// authentication for postgres on 127.0.0.1, on a free port) and returns its
// port: the PostgreSQL recipe creates its databases there, so nothing is left
// on a shared server. The cluster and its directory go when t ends.
func throwawayPostgres(t *testing.T) int {
	t.Helper()
	bin, err := pgtest.BinDir()
	require.NoError(t, err, "the PostgreSQL recipe's test runs a cluster of its own from the server binaries")
	// Not t.TempDir: its parent is private to root, and the cluster runs as
	// the postgres user when the tests run as root.
	dir, err := os.MkdirTemp("", "recipes-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "initdb and postgres refuse root: the cluster runs as the postgres user")
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		require.NoError(t, os.Chown(dir, uid, gid))
	}
	command := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
		return cmd
	}
	data := filepath.Join(dir, "data")
	out, err := command("initdb", "-D", data, "-U", "postgres", "-A", "trust", "--no-sync", "--encoding=UTF8", "--locale=C").CombinedOutput()
	require.NoError(t, err, "initdb: %s", out)
	port, err := pgtest.FreePort()
	require.NoError(t, err)
	var log proctest.Buffer
	server := command("postgres", "-D", data, "-p", strconv.Itoa(port), "-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=", "-c", "fsync=off", "-c", "log_min_messages=warning")
	server.Stdout, server.Stderr = &log, &log
	require.NoError(t, server.Start())
	done := make(chan struct{})
	go func() { _ = server.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-server.Process.Pid, syscall.SIGKILL)
		<-done
	})
	url := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return false
		}
		defer conn.Close(ctx)
		return conn.Ping(ctx) == nil
	}, 2*time.Minute, 100*time.Millisecond, "the throwaway cluster at %s never answered:\n%s", url, &log)
	return port
}

// requireGroupGone waits until no live process is left in process group pgid
// (zombies aside: their parent, gone, cannot reap them), failing t with what
// is left after timeout.
func requireGroupGone(t *testing.T, pgid int, timeout time.Duration) {
	t.Helper()
	var left []string
	deadline := time.Now().Add(timeout)
	for {
		left = left[:0]
		stats, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, f := range stats {
			b, err := os.ReadFile(f)
			if err != nil {
				continue
			}
			// pid (comm) state ppid pgrp …; comm may hold spaces and parentheses.
			s := string(b)
			end := strings.LastIndexByte(s, ')')
			fields := strings.Fields(s[end+1:])
			if len(fields) < 3 || fields[0] == "Z" || fields[2] != strconv.Itoa(pgid) {
				continue
			}
			left = append(left, s[:end+1])
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the recipe's last step left %d processes running after %s: %v", len(left), timeout, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logTails logs the end of each log file a recipe wrote in dir.
func logTails(t *testing.T, dir string) {
	t.Helper()
	logs, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, f := range logs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		t.Logf("--- %s, last %d lines ---\n%s", filepath.Base(f), min(len(lines), 30), strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
}

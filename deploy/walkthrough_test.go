package deploy

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/authtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// TestMain removes the binaries the tests built (proctest).
func TestMain(m *testing.M) { os.Exit(proctest.Run(m)) }

const walkthroughScript = "docs/walkthrough.sh"

// The README links the walk-through rather than showing it (a reader runs the
// file; TestWalkthrough and TestRecipes run the same file), and shows the
// no-install recipe that runs it, which TestRecipes runs verbatim.
func TestREADMELinksTheWalkthrough(t *testing.T) {
	t.Parallel()
	readme := read(t, "README.md")
	require.Contains(t, readme, "]("+walkthroughScript+")", "README.md links %s", walkthroughScript)
	require.NotContains(t, readme, "<!-- walkthrough:", "README.md links %s rather than showing a copy", walkthroughScript)
	require.NotContains(t, readme, "set -euo pipefail", "README.md links %s rather than showing a copy", walkthroughScript)
	r := docRecipe(t, "no-install")
	require.Equal(t, "README.md", r.file, "the no-install recipe is the README's")
	require.Contains(t, shellCommands(r.script), "bash "+walkthroughScript+" provider.log billing.log labeling.log",
		"the README's recipe runs the walk-through, naming the logs it writes")
}

// noInstallEnv is what the README's no-install recipe gives the services
// (EVENTS_TOKEN, AUTH_DISABLED, PROVIDER_SECRET exported; PROVIDER_URL on
// billing's line), its port variables at their defaults: TestWalkthrough
// starts the pair with it, so the recipe and the test start it alike.
func noInstallEnv(t *testing.T) map[string]string {
	t.Helper()
	env := map[string]string{}
	expand := func(v string) string {
		return os.Expand(v, func(name string) string {
			if k, def, ok := strings.Cut(name, ":-"); ok {
				if got, set := env[k]; set {
					return got
				}
				return def
			}
			return env[name]
		})
	}
	billing := false
	for _, c := range shellCommands(docRecipe(t, "no-install").script) {
		assigns, args := words(c)
		switch {
		case len(args) > 1 && args[0] == "export":
			for _, kv := range args[1:] {
				k, v, ok := strings.Cut(kv, "=")
				require.True(t, ok, "%q is not NAME=value", kv)
				env[k] = expand(v)
			}
		case len(args) > 0 && args[0] == "bin/billing":
			billing = true
			require.Contains(t, assigns, "PROVIDER_URL", "billing calls the provider")
			env["PROVIDER_URL"] = expand(assigns["PROVIDER_URL"])
		}
	}
	require.True(t, billing, "the no-install recipe starts bin/billing")
	require.Equal(t, "true", env["AUTH_DISABLED"], "the no-install recipe turns authentication off, as the walk-through expects")
	return env
}

var buildBinaries = sync.OnceValues(func() (map[string]string, error) {
	bins := map[string]string{}
	for _, name := range []string{"labeling", "billing", "provider"} {
		path, err := proctest.Binary("./cmd/" + name)
		if err != nil {
			return nil, err
		}
		bins[name] = path
	}
	return bins, nil
})

// binaries builds cmd/labeling, cmd/billing and cmd/provider once per test binary.
func builtBinaries(t *testing.T) map[string]string {
	t.Helper()
	bins, err := buildBinaries()
	require.NoError(t, err)
	return bins
}

// startPair starts the stand-in provider, billing calling it, then labeling
// delivering to billing, each on a free loopback port and its own database,
// with env added to all three (PROVIDER_URL then names the provider's port);
// it returns their base URLs.
func startPair(t *testing.T, env map[string]string, labelingDB, billingDB string) (labeling, billing, provider string) {
	t.Helper()
	bins := builtBinaries(t)
	with := func(extra map[string]string) map[string]string {
		out := map[string]string{"HTTP_ADDR": "127.0.0.1:0"}
		for _, m := range []map[string]string{env, extra} {
			for k, v := range m {
				out[k] = v
			}
		}
		return out
	}
	p := proctest.Start(t, bins["provider"], with(map[string]string{
		"PROVIDER_ADDR": "127.0.0.1:0", "PROVIDER_DB": filepath.Join(t.TempDir(), "provider.db")}), "serve")
	provider = "http://" + p.ListenAddr(t)
	require.NotEmpty(t, env["PROVIDER_URL"], "the no-install command sets PROVIDER_URL")
	u, err := url.Parse(env["PROVIDER_URL"])
	require.NoError(t, err)
	b := proctest.Start(t, bins["billing"], with(map[string]string{"DATABASE_URL": billingDB, "PROVIDER_URL": provider + u.Path}), "serve")
	billing = "http://" + b.ListenAddr(t)
	l := proctest.Start(t, bins["labeling"], with(map[string]string{"DATABASE_URL": labelingDB, "BILLING_URL": billing}), "serve")
	return "http://" + l.ListenAddr(t), billing, provider
}

// TestWalkthrough runs docs/walkthrough.sh with bash against the real binaries,
// started as the README's no-install command starts them (SQLite files,
// authentication off), on PostgreSQL, where the README says it works
// unchanged, and with authentication on, as the Docker Quick start runs it
// (a test issuer's token for the README's ORG, its OTHER_ORG not covered). The
// script checks every answer itself; a wrong one fails it.
func TestWalkthrough(t *testing.T) {
	t.Parallel()
	for _, run := range []string{"sqlite", "postgres", "sqlite with authentication as the Quick start"} {
		t.Run(run, func(t *testing.T) {
			t.Parallel()
			env, scriptEnv := noInstallEnv(t), []string{}
			labelingDB := "sqlite:" + filepath.Join(t.TempDir(), "labeling.db")
			billingDB := "sqlite:" + filepath.Join(t.TempDir(), "billing.db")
			switch run {
			case "postgres":
				labelingDB, billingDB = pgtest.Empty(t).URL, pgtest.Empty(t).URL
			case "sqlite with authentication as the Quick start":
				env, scriptEnv = withAuthentication(t, env)
			}
			labeling, billing, provider := startPair(t, env, labelingDB, billingDB)

			// Bounded: the script's own waits are 5 minutes for readiness (the
			// services are up already here) and 30s for each quota.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, tools(t, "bash"), walkthroughScript)
			cmd.Dir = root
			// Nothing on PATH but what the script says it needs: a jq or a
			// uuidgen slipped into it fails here, not on a reader's machine.
			cmd.Env = append([]string{"PATH=" + toolDir(t, "curl", "sleep"), "LABELING=" + labeling, "BILLING=" + billing, "PROVIDER=" + provider}, scriptEnv...)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "bash %s:\n%s", walkthroughScript, out)
			require.True(t, strings.HasSuffix(string(out), "walkthrough: ok\n"), "%s", out)
			require.Contains(t, string(out), `"activeRules":1}`)
			require.Contains(t, string(out), `"applied":1,`, "the quota change reached the provider")
		})
	}
}

// withAuthentication turns env's authentication on against a test issuer and
// returns the variables the README's Quick start gives the walk-through: AUTH,
// a token of that issuer for the README's ORG, and the README's OTHER_ORG.
func withAuthentication(t *testing.T, env map[string]string) (map[string]string, []string) {
	t.Helper()
	var step string
	for _, c := range quickStartSteps(t) {
		if strings.Contains(c, "bash "+walkthroughScript) {
			step = c
		}
	}
	m := regexp.MustCompile(`ORG=(\S+) OTHER_ORG=(\S+) bash `).FindStringSubmatch(step)
	require.NotNil(t, m, "the Quick start runs the walk-through as ORG=… OTHER_ORG=… bash %s: %q", walkthroughScript, step)
	iss := authtest.New(t)
	cfg := iss.Config()
	on := map[string]string{"AUTH_DISABLED": "false", "AUTH_JWKS_URL": cfg.JWKSURL, "AUTH_ISSUER": cfg.Issuer, "AUTH_AUDIENCE": cfg.Audience}
	for k, v := range env {
		if _, set := on[k]; !set {
			on[k] = v
		}
	}
	return on, []string{"AUTH=Authorization: Bearer " + iss.For(t, m[1]), "ORG=" + m[1], "OTHER_ORG=" + m[2]}
}

// tools returns the path of an installed program, failing t without it.
func tools(t *testing.T, name string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	require.NoError(t, err, "the walk-through needs %s", name)
	return path
}

// toolDir returns a directory holding only the named programs (links to the
// installed ones), to be the whole PATH of a script.
func toolDir(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, name := range names {
		require.NoError(t, os.Symlink(tools(t, name), filepath.Join(dir, name)))
	}
	return dir
}

// TestWalkthroughWait holds the walk-through's wait for the services to what
// docs/walkthrough.sh promises: while a Go compiler runs it says "still
// compiling" and keeps waiting; once it gives up (READY_WAIT seconds without a
// build, four times that in all) it names the URL it waited for and the logs
// it was given.
func TestWalkthroughWait(t *testing.T) {
	t.Parallel()
	closed := "http://127.0.0.1:1" // nothing listens on port 1
	run := func(t *testing.T, ready string, logs ...string) (*exec.Cmd, *proctest.Buffer) {
		stderr := &proctest.Buffer{} // written by the command while the test reads it
		cmd := exec.Command(tools(t, "bash"), append([]string{walkthroughScript}, logs...)...)
		cmd.Dir = root
		cmd.Env = []string{"PATH=" + toolDir(t, "curl", "sleep"), "READY_WAIT=" + ready,
			"LABELING=" + closed, "BILLING=" + closed, "PROVIDER=" + closed}
		cmd.Stderr = stderr
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd, stderr
	}

	t.Run("gives up naming the URL and the logs", func(t *testing.T) {
		t.Parallel()
		cmd, stderr := run(t, "1", "provider.log", "billing.log", "labeling.log")
		err := cmd.Wait()
		require.Error(t, err, "the walk-through gave up: %s", stderr)
		require.Contains(t, stderr.String(),
			"walkthrough: gave up: "+closed+"/readyz did not answer; see provider.log, billing.log, labeling.log\n")
	})

	t.Run("says still compiling while a compiler runs", func(t *testing.T) {
		t.Parallel()
		// A process named compile, as the Go toolchain's compiler is: the
		// kernel names a process after the file it runs.
		dir := t.TempDir()
		fake := filepath.Join(dir, "compile")
		require.NoError(t, os.Symlink(tools(t, "sleep"), fake))
		compiler := exec.Command(fake, "600")
		require.NoError(t, compiler.Start())
		t.Cleanup(func() { _ = compiler.Process.Kill(); _ = compiler.Wait() })

		cmd, stderr := run(t, "2")
		require.Eventually(t, func() bool {
			return strings.Contains(stderr.String(), "walkthrough: still compiling (a Go build runs on this machine); waiting for "+closed+"/readyz\n")
		}, time.Minute, 50*time.Millisecond, "the walk-through says it waits for a build: %s", stderr)
		require.NoError(t, compiler.Process.Kill())
		err := cmd.Wait()
		require.Error(t, err, "the walk-through gave up once the build was gone: %s", stderr)
		require.Contains(t, stderr.String(), "walkthrough: gave up: "+closed+"/readyz did not answer; see the services' logs\n")
	})
}

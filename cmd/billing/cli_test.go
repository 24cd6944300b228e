package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/cli"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
)

// runArgs runs the program in this process with no environment.
func runArgs(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, func(string) (string, bool) { return "", false }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsage(t *testing.T) {
	t.Parallel()

	t.Run("a usage error prints what is wrong, then the help command to run, on stderr and exits 2", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runArgs("nats")
		require.Equal(t, cli.ExitUsage, code)
		require.Empty(t, stdout)
		require.Equal(t, "billing: nats needs a subcommand: failed or replay\nrun \"billing help nats\" for the usage\n", stderr)
		code, stdout, _ = runArgs("help", "nats")
		require.Equal(t, cli.ExitOK, code)
		require.Contains(t, stdout, "nats failed")
		require.NotContains(t, stdout, "apply pending migrations")
	})

	t.Run("-h after a command prints the usage on stdout and exits 0", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runArgs("nats", "failed", "-h")
		require.Equal(t, cli.ExitOK, code)
		require.Equal(t, program.Usage(), stdout)
		require.Empty(t, stderr)
	})

	t.Run("help names every command, and every variable billing reads and no other", func(t *testing.T) {
		t.Parallel()
		_, stdout, _ := runArgs("help")
		for _, c := range program.Commands {
			require.Contains(t, stdout, "\n  "+c.Name+" ", c.Name)
		}
		_, environment, found := strings.Cut(stdout, "\nconfiguration (environment):\n")
		require.True(t, found, stdout)
		named := regexp.MustCompile(`\b[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+\b`).FindAllString(environment, -1)
		require.ElementsMatch(t, envvar.BillingService.Names(), slices.Compact(slices.Sorted(slices.Values(named))))
		// What the hand-written text left out.
		for _, name := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME", "NATS_CREDS", "NATS_MAX_DELIVERIES", "BILLING_APPLY_GROUP_MAX"} {
			require.Contains(t, environment, name)
		}
	})
}

// Not parallel: it shortens the package's commandTimeout, which only run reads.
func TestMigrateIsBounded(t *testing.T) {
	db := pgtest.Empty(t)
	ctx := t.Context()
	// Another replica is migrating: it holds goose's session lock.
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var locked bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(4097083626)`).Scan(&locked))
	require.True(t, locked)
	defer func() { _, _ = conn.Exec(ctx, `SELECT pg_advisory_unlock(4097083626)`) }()

	saved := commandTimeout
	commandTimeout = time.Second
	defer func() { commandTimeout = saved }()

	lookup := func(name string) (string, bool) {
		v, ok := map[string]string{"DATABASE_URL": db.URL}[name] // no EVENTS_TOKEN: migrate never delivers
		return v, ok
	}
	done := make(chan int, 1)
	var stdout, stderr bytes.Buffer
	go func() { done <- run([]string{"migrate"}, lookup, &stdout, &stderr) }()

	select {
	case code := <-done:
		require.Equal(t, 1, code, "gave up waiting for the lock")
		require.Equal(t, 1, bytes.Count(stderr.Bytes(), []byte("\n")), "one line: %q", stderr.String())
		require.Contains(t, stderr.String(), "billing: ")
	case <-time.After(30 * time.Second):
		t.Fatal("billing migrate waits for the migration lock without a bound")
	}
}

func TestOperatorCommandsNeedNoToken(t *testing.T) {
	t.Parallel()
	db := pgtest.Empty(t)
	lookup := func(name string) (string, bool) {
		v, ok := map[string]string{"DATABASE_URL": db.URL}[name]
		return v, ok
	}
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"migrate"}, lookup, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), `"msg":"migration applied"`)
}

func TestNATSFailedNeverCreatesADatabase(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"nats", "failed"}, {"nats", "replay", "--all"}} {
		t.Run(strings.Join(args, " ")+" on a missing SQLite file exits 1 naming its absolute path and creates nothing", func(t *testing.T) {
			t.Parallel()
			neverCreates(t, args)
		})
	}
}

func neverCreates(t *testing.T, args []string) {
	dir := filepath.Join(t.TempDir(), "missing")
	path := filepath.Join(dir, "billing.db")
	vars := map[string]string{"DATABASE_URL": "sqlite:" + path, "EVENTS_TOKEN": "t"}
	var out, errOut bytes.Buffer

	code := run(args, func(k string) (string, bool) { v, ok := vars[k]; return v, ok }, &out, &errOut)

	require.Equal(t, 1, code, errOut.String())
	require.Empty(t, out.String())
	require.Contains(t, errOut.String(), "DATABASE_URL")
	require.Contains(t, errOut.String(), path)
	_, err := os.Stat(dir)
	require.ErrorIs(t, err, os.ErrNotExist, "neither the file nor its folder is created")
}

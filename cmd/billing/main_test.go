package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/pgtest"
)

// build is one build of the binary, made once per test run.
type build struct {
	once sync.Once
	path string
	err  error
}

var (
	binDir string
	plain  = &build{}
	withFP = &build{}
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "billing-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// binary builds cmd/billing as the real binary: no race detector, no failpoints.
func binary(t *testing.T) string { return plain.get(t, "billing") }

// failpointBinary builds cmd/billing with -tags failpoints, for crash tests.
func failpointBinary(t *testing.T) string {
	return withFP.get(t, "billing-failpoints", "-tags", "failpoints")
}

func (b *build) get(t *testing.T, name string, flags ...string) string {
	t.Helper()
	b.once.Do(func() {
		b.path = filepath.Join(binDir, name)
		args := append([]string{"build", "-o", b.path}, flags...)
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			b.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	require.NoError(t, b.err)
	return b.path
}

// emptyDatabase creates a database with no tables, so that the binary's own
// migrations are what creates them; it is dropped when t ends.
func emptyDatabase(t *testing.T) string {
	t.Helper()
	admin := pgtest.ServerURL(t)
	ctx := context.Background()
	name := "billing_cmd_" + strings.ReplaceAll(uuid.NewString(), "-", "")[:16]
	conn, err := pgx.Connect(ctx, admin)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), admin)
		if err != nil {
			t.Logf("drop %s: %v", name, err)
			return
		}
		defer conn.Close(context.Background())
		_, _ = conn.Exec(context.Background(), "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	u, err := url.Parse(admin)
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// env is the test process's environment without any billing variable, plus vars.
func env(vars ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		skip := false
		for _, v := range config.BillingVars {
			skip = skip || name == v
		}
		if !skip {
			out = append(out, kv)
		}
	}
	return append(out, vars...)
}

type result struct {
	code           int
	stdout, stderr string
}

// runCmd runs the binary to completion with a deadline.
func runCmd(t *testing.T, environ []string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary(t), args...)
	cmd.Env = environ
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if err != nil && code < 0 {
		t.Fatalf("run billing %v: %v", args, err)
	}
	return result{code: code, stdout: stdout.String(), stderr: stderr.String()}
}

// server is a running `billing serve`.
type server struct {
	cmd    *exec.Cmd
	addr   string
	exited chan error
	stderr *bytes.Buffer
}

// startServer starts `billing serve` on a free port and waits for its listen log.
func startServer(t *testing.T, environ []string) *server {
	t.Helper()
	return startBinary(t, binary(t), environ)
}

func startBinary(t *testing.T, bin string, environ []string) *server {
	t.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.Env = environ
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	s := &server{cmd: cmd, exited: make(chan error, 1), stderr: &bytes.Buffer{}}
	cmd.Stderr = s.stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-s.exited
		}
	})

	addrs := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			var line struct {
				Msg, Addr string
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "http listening" {
				addrs <- line.Addr
			}
		}
		s.exited <- cmd.Wait()
	}()
	select {
	case s.addr = <-addrs:
	case err := <-s.exited:
		s.exited <- err
		t.Fatalf("billing exited before listening: %v\nstderr: %s", err, s.stderr)
	case <-time.After(time.Minute):
		t.Fatalf("billing did not listen within a minute\nstderr: %s", s.stderr)
	}
	return s
}

func (s *server) stop(t *testing.T) int {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("billing did not exit within 30s of SIGTERM")
	}
	return s.cmd.ProcessState.ExitCode()
}

func TestServe(t *testing.T) {
	t.Parallel()

	t.Run("migrates, serves, applies an event once and exits 0 on SIGTERM", func(t *testing.T) {
		t.Parallel()
		const tok = "cmd-test-token"
		s := startServer(t, env("DATABASE_URL="+emptyDatabase(t), "EVENTS_TOKEN="+tok, "HTTP_ADDR=127.0.0.1:0"))
		base := "http://" + s.addr
		client := &http.Client{Timeout: 10 * time.Second}

		get := func(path string) (int, string) {
			resp, err := client.Get(base + path)
			require.NoError(t, err)
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		code, _ := get("/readyz")
		require.Equal(t, http.StatusOK, code)
		code, _ = get("/healthz")
		require.Equal(t, http.StatusOK, code)

		org, id := uuid.New(), uuid.Must(uuid.NewV7())
		body := fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":1767225600000,"payload":{"orgId":%q,"ruleId":%q}}`, id, org, uuid.New())
		for range 2 {
			req, err := http.NewRequest(http.MethodPost, base+"/internal/v1/events", strings.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Idempotency-Key", id.String())
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusNoContent, resp.StatusCode)
		}
		code, quota := get("/v1/orgs/" + org.String() + "/quota")
		require.Equal(t, http.StatusOK, code)
		require.JSONEq(t, fmt.Sprintf(`{"orgId":%q,"activeRules":1}`, org), quota)

		code, metrics := get("/metrics")
		require.Equal(t, http.StatusOK, code)
		require.Contains(t, metrics, `billing_events_total{outcome="applied",type="RuleActivated"} 1`)
		require.Contains(t, metrics, `billing_events_total{outcome="already_applied",type="RuleActivated"} 1`)

		hc := runCmd(t, env("DATABASE_URL=postgres://x@127.0.0.1:1/x", "EVENTS_TOKEN=x", "HTTP_ADDR="+s.addr), "healthcheck")
		require.Equal(t, 0, hc.code, hc.stderr)

		require.Equal(t, 0, s.stop(t), s.stderr.String())

		hc = runCmd(t, env("DATABASE_URL=postgres://x@127.0.0.1:1/x", "EVENTS_TOKEN=x", "HTTP_ADDR="+s.addr), "healthcheck")
		require.Equal(t, 1, hc.code)
		require.True(t, strings.HasPrefix(hc.stderr, "billing: "), hc.stderr)
	})

	t.Run("migrate creates billing's tables and exits 0, twice", func(t *testing.T) {
		t.Parallel()
		dbURL := emptyDatabase(t)
		for range 2 {
			r := runCmd(t, env("DATABASE_URL="+dbURL, "EVENTS_TOKEN=x"), "migrate")
			require.Equal(t, 0, r.code, r.stderr)
		}
		conn, err := pgx.Connect(context.Background(), dbURL)
		require.NoError(t, err)
		defer conn.Close(context.Background())
		var n int
		require.NoError(t, conn.QueryRow(context.Background(),
			`SELECT count(*) FROM information_schema.tables WHERE table_name IN ('billing_quota', 'billing_receipts')`).Scan(&n))
		require.Equal(t, 2, n)
	})
}

func TestBadStart(t *testing.T) {
	t.Parallel()

	oneLine := func(t *testing.T, r result, name string) {
		t.Helper()
		require.Equal(t, 1, r.code)
		require.True(t, strings.HasPrefix(r.stderr, "billing: "), r.stderr)
		require.Contains(t, r.stderr, name)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
	}

	t.Run("a missing EVENTS_TOKEN stops start-up with one line naming it", func(t *testing.T) {
		t.Parallel()
		oneLine(t, runCmd(t, env("DATABASE_URL=postgres://postgres@127.0.0.1:5432/x")), "EVENTS_TOKEN")
	})

	t.Run("a missing DATABASE_URL stops start-up with one line naming it", func(t *testing.T) {
		t.Parallel()
		oneLine(t, runCmd(t, env("EVENTS_TOKEN=x"), "serve"), "DATABASE_URL")
	})

	t.Run("a bad RECEIPTS_RETENTION stops start-up with one line naming it", func(t *testing.T) {
		t.Parallel()
		oneLine(t, runCmd(t, env("DATABASE_URL=postgres://postgres@127.0.0.1:5432/x", "EVENTS_TOKEN=x", "RECEIPTS_RETENTION=30d")), "RECEIPTS_RETENTION")
	})

	t.Run("an unknown subcommand prints the usage and exits 2", func(t *testing.T) {
		t.Parallel()
		r := runCmd(t, env(), "deploy")
		require.Equal(t, 2, r.code)
		require.Contains(t, r.stderr, "usage: billing")
		require.Empty(t, r.stdout)
	})

	t.Run("help prints the usage and exits 0", func(t *testing.T) {
		t.Parallel()
		r := runCmd(t, env(), "help")
		require.Equal(t, 0, r.code)
		require.Contains(t, r.stdout, "usage: billing")
	})
}

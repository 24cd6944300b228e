package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

func TestMain(m *testing.M) { os.Exit(proctest.Run(m)) }

// binary builds cmd/billing as the real binary: no race detector, no failpoints.
func binary(t *testing.T) string { return proctest.Build(t, "./cmd/billing") }

// failpointBinary builds cmd/billing with -tags failpoints, for crash tests.
func failpointBinary(t *testing.T) string { return proctest.Build(t, "./cmd/billing", "failpoints") }

// env is exactly vars, each "NAME=value": no billing variable leaks in from the
// test's own environment.
func env(vars ...string) map[string]string {
	out := map[string]string{}
	for _, kv := range vars {
		name, value, _ := strings.Cut(kv, "=")
		out[name] = value
	}
	return out
}

type result struct {
	code           int
	stdout, stderr string
}

// runCmd runs the binary to completion with a deadline.
func runCmd(t *testing.T, environ map[string]string, args ...string) result {
	t.Helper()
	p := proctest.Start(t, binary(t), environ, args...)
	state := p.Wait(t, time.Minute)
	if state.ExitCode() < 0 {
		t.Fatalf("run billing %v: %s", args, state)
	}
	return result{code: state.ExitCode(), stdout: p.Stdout.String(), stderr: p.Stderr.String()}
}

// server is a running `billing serve`.
type server struct {
	*proctest.Process
	addr string
}

// startServer starts `billing serve` on a free port and waits for its listen log.
func startServer(t *testing.T, environ map[string]string) *server {
	t.Helper()
	return startBinary(t, binary(t), environ)
}

func startBinary(t *testing.T, bin string, environ map[string]string) *server {
	t.Helper()
	p := proctest.Start(t, bin, environ, "serve")
	return &server{Process: p, addr: p.ListenAddr(t)}
}

// stop sends SIGTERM and returns the exit code, failing t after 30s.
func (s *server) stop(t *testing.T) int {
	t.Helper()
	s.Signal(t, syscall.SIGTERM)
	return s.Wait(t, 30*time.Second).ExitCode()
}

func TestServe(t *testing.T) {
	t.Parallel()

	t.Run("migrates, serves, applies an event once and exits 0 on SIGTERM", func(t *testing.T) {
		t.Parallel()
		const tok = "cmd-test-token"
		s := startServer(t, env("DATABASE_URL="+pgtest.Empty(t).URL, "EVENTS_TOKEN="+tok, "HTTP_ADDR=127.0.0.1:0", "AUTH_DISABLED=true"))
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
		body := fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":`+occurredNow()+`,"payload":{"orgId":%q,"ruleId":%q}}`, id, org, uuid.New())
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

		require.Equal(t, 0, s.stop(t), s.Stderr.String())

		hc = runCmd(t, env("DATABASE_URL=postgres://x@127.0.0.1:1/x", "EVENTS_TOKEN=x", "HTTP_ADDR="+s.addr), "healthcheck")
		require.Equal(t, 1, hc.code)
		require.True(t, strings.HasPrefix(hc.stderr, "billing: "), hc.stderr)
	})

	t.Run("migrate creates billing's tables and exits 0, twice", func(t *testing.T) {
		t.Parallel()
		dbURL := pgtest.Empty(t).URL
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

	t.Run("a sqlite: DATABASE_URL without a path stops start-up with one line naming it", func(t *testing.T) {
		t.Parallel()
		oneLine(t, runCmd(t, env("EVENTS_TOKEN=x", "DATABASE_URL=sqlite:"), "serve"), "DATABASE_URL")
	})

	t.Run("a bad RECEIPTS_RETENTION stops start-up with one line naming it", func(t *testing.T) {
		t.Parallel()
		oneLine(t, runCmd(t, env("DATABASE_URL=postgres://postgres@127.0.0.1:5432/x", "EVENTS_TOKEN=x", "RECEIPTS_RETENTION=30d")), "RECEIPTS_RETENTION")
	})

	t.Run("an unknown subcommand prints the error and the help to run, two lines, and exits 2", func(t *testing.T) {
		t.Parallel()
		r := runCmd(t, env(), "deploy")
		require.Equal(t, 2, r.code)
		require.Equal(t, "billing: unknown command \"deploy\"\nrun \"billing help\" for the usage\n", r.stderr)
		require.Empty(t, r.stdout)
	})

	t.Run("help prints the usage and exits 0", func(t *testing.T) {
		t.Parallel()
		r := runCmd(t, env(), "help")
		require.Equal(t, 0, r.code)
		require.Contains(t, r.stdout, "usage: billing")
	})
}

func TestGracefulStop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	const tok = "stop-test-token"
	db := pgtest.Empty(t)
	s := startServer(t, env("DATABASE_URL="+db.URL, "EVENTS_TOKEN="+tok, "HTTP_ADDR=127.0.0.1:0", "DB_LOCK_TIMEOUT=30s", "AUTH_DISABLED=true"))

	// A delivery in flight: its quota update waits for a row lock the test holds.
	org := uuid.New()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `INSERT INTO billing_quota (org_id, active_rules, updated_at) VALUES ($1, 5, 0)`, org)
	require.NoError(t, err)
	id := uuid.Must(uuid.NewV7())
	body := fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":`+occurredNow()+`,"payload":{"orgId":%q,"ruleId":%q}}`, id, org, uuid.New())
	inflight := make(chan int, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, "http://"+s.addr+"/internal/v1/events", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			inflight <- 0
			return
		}
		resp.Body.Close()
		inflight <- resp.StatusCode
	}()
	require.Eventually(t, func() bool {
		var waiting int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting == 1
	}, 30*time.Second, 10*time.Millisecond, "the delivery waits for the lock")

	s.Signal(t, syscall.SIGTERM)
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, 3*time.Second, 10*time.Millisecond, "new connections are refused at once after SIGTERM")

	require.NoError(t, tx.Commit(ctx))
	select {
	case code := <-inflight:
		require.Equal(t, http.StatusNoContent, code, "the delivery in flight is answered, after its commit")
	case <-time.After(30 * time.Second):
		t.Fatal("the delivery in flight was never answered")
	}
	require.Equal(t, 0, s.Wait(t, 30*time.Second).ExitCode(), s.Stderr.String())
	var n int64
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT active_rules FROM billing_quota WHERE org_id = $1`, org).Scan(&n))
	require.Equal(t, int64(6), n)
}

// occurredNow is an occurredAt (epoch ms) of now: billing refuses an event older
// than RECEIPTS_RETENTION less its margin, so a test's event must be recent.
func occurredNow() string { return strconv.FormatInt(time.Now().UnixMilli(), 10) }

package main

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/pgtest"
	"github.com/acme/outboxpair/infra/proctest"
	"github.com/acme/outboxpair/migrations"
)

func TestMain(m *testing.M) { os.Exit(proctest.Run(m)) }

// binary builds cmd/labeling once per set of build tags and returns its path.
func binary(t *testing.T, tags ...string) string {
	return proctest.Build(t, "./cmd/labeling", tags...)
}

func baseEnv(databaseURL string) map[string]string {
	return map[string]string{
		"DATABASE_URL": databaseURL,
		"EVENTS_TOKEN": "test-token",
		"HTTP_ADDR":    "127.0.0.1:0",
		// These tests are about the process, not authentication (auth_test.go).
		"AUTH_DISABLED": "true",
	}
}

func TestServeProcess(t *testing.T) {
	t.Parallel()

	t.Run("starts, serves the API and readiness, and exits 0 on SIGTERM", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t, migrations.Labeling)
		bin := binary(t, "")
		p := proctest.Start(t, bin, baseEnv(db.URL), "serve")
		base := "http://" + p.ListenAddr(t)
		client := &http.Client{Timeout: 5 * time.Second}
		status := func(method, path, body string) int {
			req, err := http.NewRequest(method, base+path, strings.NewReader(body))
			require.NoError(t, err)
			resp, err := client.Do(req)
			if err != nil {
				return 0
			}
			resp.Body.Close()
			return resp.StatusCode
		}
		require.Eventually(t, func() bool { return status(http.MethodGet, "/readyz", "") == http.StatusOK },
			30*time.Second, 20*time.Millisecond)
		require.Equal(t, http.StatusOK, status(http.MethodGet, "/healthz", ""))
		healthEnv := baseEnv(db.URL)
		healthEnv["HTTP_ADDR"] = strings.TrimPrefix(base, "http://")
		require.Equal(t, exitOK, proctest.Start(t, bin, healthEnv, "healthcheck").Wait(t, 30*time.Second).ExitCode())

		org, id := uuid.NewString(), uuid.NewString()
		body := fmt.Sprintf(`{"id":%q,"name":"n","pattern":"p","label":"l"}`, id)
		require.Equal(t, http.StatusCreated, status(http.MethodPost, "/v1/orgs/"+org+"/rules", body))
		require.Equal(t, http.StatusOK, status(http.MethodPost, "/v1/orgs/"+org+"/rules/"+id+"/activate", ""))

		resp, err := client.Get(base + "/metrics")
		require.NoError(t, err)
		var metrics bytes.Buffer
		_, _ = metrics.ReadFrom(resp.Body)
		resp.Body.Close()
		require.Contains(t, metrics.String(), `http_requests_total{code="201",method="POST",route="/v1/orgs/:orgId/rules"} 1`)
		require.Contains(t, metrics.String(), `outbox_events_appended_total{tag="RuleActivated"} 1`)
		require.Contains(t, metrics.String(), "outbox_oldest_pending_age_seconds", "the backlog gauges are served")
		require.Contains(t, metrics.String(), "outbox_failed_rows 0")

		p.Signal(t, syscall.SIGTERM)
		require.Equal(t, 0, p.Wait(t, 30*time.Second).ExitCode(), p.Stderr.String())
		p.LogLines(t) // every line is JSON
		require.Equal(t, exitFail, proctest.Start(t, bin, healthEnv, "healthcheck").Wait(t, 30*time.Second).ExitCode(),
			"healthcheck fails once the server is gone")
	})

	t.Run("a bad OUTBOX_LEASE stops start-up with a line naming it", func(t *testing.T) {
		t.Parallel()
		env := baseEnv("postgres://postgres@127.0.0.1:1/none")
		env["OUTBOX_LEASE"] = "1s"
		p := proctest.Start(t, binary(t), env)

		require.Equal(t, exitFail, p.Wait(t, 30*time.Second).ExitCode())
		stderr := p.Stderr.String()
		require.True(t, strings.HasPrefix(stderr, "labeling: OUTBOX_LEASE: "), stderr)
		require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	})

	t.Run("a taken HTTP port stops start-up with a line naming HTTP_ADDR", func(t *testing.T) {
		t.Parallel()
		taken, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		t.Cleanup(func() { taken.Close() })
		db := pgtest.New(t, migrations.Labeling)
		env := baseEnv(db.URL)
		env["HTTP_ADDR"] = taken.Addr().String()
		p := proctest.Start(t, binary(t), env, "serve")

		require.Equal(t, exitFail, p.Wait(t, 60*time.Second).ExitCode())
		require.Contains(t, p.Stderr.String(), "HTTP_ADDR")
	})
}

func TestActivateAfterCommitCrash(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t, migrations.Labeling)
	env := baseEnv(db.URL)
	env["FAILPOINTS"] = "labeling.activate.after-commit=exit"
	p := proctest.Start(t, binary(t, "failpoints"), env)
	base := "http://" + p.ListenAddr(t)
	org, id := uuid.NewString(), uuid.NewString()
	resp, err := http.Post(base+"/v1/orgs/"+org+"/rules", "application/json",
		strings.NewReader(fmt.Sprintf(`{"id":%q,"name":"n","pattern":"p","label":"l"}`, id)))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	_, err = http.Post(base+"/v1/orgs/"+org+"/rules/"+id+"/activate", "application/json", nil)

	require.Error(t, err, "the process dies before it answers")
	state := p.Wait(t, 30*time.Second)
	ws := state.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "killed by the failpoint: %s", state)
	require.Contains(t, p.Stderr.String(), "failpoint labeling.activate.after-commit: exit")
	var active bool
	require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT active FROM labeling_rules WHERE id = $1`, id).Scan(&active))
	require.True(t, active, "the activation was committed before the crash")
	var events int
	require.NoError(t, db.Pool.QueryRow(t.Context(),
		`SELECT count(*) FROM outbox_events WHERE event_tag = 'RuleActivated' AND payload->>'ruleId' = $1`, id).Scan(&events))
	require.Equal(t, 1, events, "its event was committed with it")
}

func TestFailpointsOnlyInTaggedBuilds(t *testing.T) {
	t.Parallel()

	contains := func(t *testing.T, path string) bool {
		b, err := os.ReadFile(path)
		require.NoError(t, err)
		return bytes.Contains(b, []byte("FAILPOINTS"))
	}
	t.Run("a normal build holds no failpoint machinery", func(t *testing.T) {
		t.Parallel()
		require.False(t, contains(t, binary(t)))
	})
	t.Run("a failpoints build reads FAILPOINTS", func(t *testing.T) {
		t.Parallel()
		require.True(t, contains(t, binary(t, "failpoints")))
	})
}

package main

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
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
		// Never the default (localhost:8081), where a developer's billing may be
		// running: port 1 refuses, so deliveries fail and are retried. A test that
		// needs a billing sets its own.
		"BILLING_URL": "http://127.0.0.1:1",
		// These tests are about the process, not authentication (auth_test.go).
		"AUTH_DISABLED": "true",
	}
}

func TestServeProcess(t *testing.T) {
	t.Parallel()

	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("starts, serves the API and readiness, and exits 0 on SIGTERM", func(t *testing.T) {
			t.Parallel()
			// On SQLite, a file the process creates and migrates itself.
			dbURL := "sqlite:" + filepath.Join(t.TempDir(), "labeling.db")
			if d == sqldb.Postgres {
				dbURL = pgtest.New(t, migrations.Labeling).URL
			}
			db := struct{ URL string }{dbURL}
			bin := binary(t, "")
			p := proctest.Start(t, bin, baseEnv(db.URL), "serve")
			base := "http://" + p.ListenAddr(t)
			client := &http.Client{Timeout: 5 * time.Second}
			status := func(method, path, body string) int {
				req, err := http.NewRequest(method, base+path, strings.NewReader(body))
				require.NoError(t, err)
				if body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
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
			require.Contains(t, metrics.String(), `outbox_events_appended_total{subscriber="",tag="RuleActivated"} 1`)
			require.Contains(t, metrics.String(), "outbox_oldest_pending_age_seconds", "the backlog gauges are served")
			require.Contains(t, metrics.String(), "outbox_failed_rows 0")

			p.Signal(t, syscall.SIGTERM)
			require.Equal(t, 0, p.Wait(t, 30*time.Second).ExitCode(), p.Stderr.String())
			p.LogLines(t) // every line is JSON
			require.Equal(t, exitFail, proctest.Start(t, bin, healthEnv, "healthcheck").Wait(t, 30*time.Second).ExitCode(),
				"healthcheck fails once the server is gone")
		})
	})

	t.Run("with no DATABASE_URL it uses data/labeling.db under the working directory and says so", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		env := baseEnv("")
		delete(env, "DATABASE_URL")
		p := proctest.StartIn(t, dir, binary(t, ""), env, "serve")
		base := "http://" + p.ListenAddr(t)
		require.Eventually(t, func() bool {
			resp, err := http.Get(base + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 30*time.Second, 20*time.Millisecond)
		_, err := os.Stat(filepath.Join(dir, "data", "labeling.db"))
		require.NoError(t, err, "the file and its folder are created")
		p.Signal(t, syscall.SIGTERM)
		require.Equal(t, 0, p.Wait(t, 30*time.Second).ExitCode(), p.Stderr.String())
		said := false
		for _, line := range p.LogLines(t) {
			if msg, _ := line["msg"].(string); strings.Contains(msg, "DATABASE_URL is unset") && line["database_url"] == "sqlite:data/labeling.db" {
				said = true
			}
		}
		require.True(t, said, "a log line says which file is used")
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
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := dbtest.New(t, d, migrations.Labeling)
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

		resp, err = http.Post(base+"/v1/orgs/"+org+"/rules/"+id+"/activate", "application/json", nil)
		if err == nil {
			resp.Body.Close()
		}

		require.Error(t, err, "the process dies before it answers")
		state := p.Wait(t, 30*time.Second)
		ws := state.Sys().(syscall.WaitStatus)
		require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "killed by the failpoint: %s", state)
		require.Contains(t, p.Stderr.String(), "failpoint labeling.activate.after-commit: exit")
		var active bool
		require.NoError(t, db.QueryRow(`SELECT active FROM labeling_rules WHERE id = $1`, id).Scan(&active))
		require.True(t, active, "the activation was committed before the crash")
		var events int
		require.NoError(t, db.QueryRow(
			`SELECT count(*) FROM outbox_events WHERE event_tag = 'RuleActivated' AND payload->>'ruleId' = $1`, id).Scan(&events))
		require.Equal(t, 1, events, "its event was committed with it")
	})
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

func TestGracefulStop(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t, migrations.Labeling)

	// The relay's dispatch hangs until the relay gives up on it.
	billingURL, delivered := hangingBilling(t)

	env := baseEnv(db.URL)
	env["BILLING_URL"] = billingURL
	env["OUTBOX_HANDLER_TIMEOUT"] = "60s"
	env["OUTBOX_CLAIM_SIZE"] = "1"
	env["OUTBOX_LEASE"] = "2m"
	env["DB_LOCK_TIMEOUT"] = "30s"
	p := proctest.Start(t, binary(t), env, "serve")
	addr := p.ListenAddr(t)
	base := "http://" + addr
	client := &http.Client{Timeout: 30 * time.Second}
	post := func(path, body string) (int, error) {
		resp, err := client.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	org := uuid.NewString()
	rule := func() string {
		id := uuid.NewString()
		code, err := post("/v1/orgs/"+org+"/rules", fmt.Sprintf(`{"id":%q,"name":"n","pattern":"p","label":"l"}`, id))
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, code)
		return id
	}

	// 1. The relay holds a dispatch that will never be answered.
	hung := rule()
	code, err := post("/v1/orgs/"+org+"/rules/"+hung+"/activate", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	select {
	case <-delivered:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay never dispatched to the stand-in")
	}

	// 2. A request is in flight: its activation waits for a row lock the test holds.
	slow := rule()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM labeling_rules WHERE id = $1 FOR UPDATE`, slow)
	require.NoError(t, err)
	inflight := make(chan int, 1)
	go func() {
		code, err := post("/v1/orgs/"+org+"/rules/"+slow+"/activate", "")
		if err != nil {
			code = 0
		}
		inflight <- code
	}()
	require.Eventually(t, func() bool {
		var waiting int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting == 1
	}, 30*time.Second, 10*time.Millisecond, "the activation waits for the lock")
	// A connection opened before SIGTERM whose request comes after it.
	late, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer late.Close()

	// 3. SIGTERM: new connections are refused at once, although the relay still
	// holds its hung dispatch.
	p.Signal(t, syscall.SIGTERM)
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err != nil
	}, 3*time.Second, 10*time.Millisecond, "new connections are refused at once after SIGTERM")
	lateRule := uuid.NewString()
	require.NoError(t, late.SetDeadline(time.Now().Add(10*time.Second)))
	body := fmt.Sprintf(`{"id":%q,"name":"n","pattern":"p","label":"l"}`, lateRule)
	// A connection still in the listen backlog when the listener closed is reset
	// (the write or the read fails): that refuses the late request too. What must
	// never happen is an answer other than 503, or a commit (checked at the end).
	_, err = fmt.Fprintf(late, "POST /v1/orgs/%s/rules HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", org, len(body), body)
	if err == nil {
		if resp, err := http.ReadResponse(bufio.NewReader(late), nil); err == nil {
			resp.Body.Close()
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "a late request is refused, if answered at all")
		}
	}

	// 4. The request in flight is answered once its lock is free.
	require.NoError(t, tx.Commit(ctx))
	select {
	case code := <-inflight:
		require.Equal(t, http.StatusOK, code, "the request in flight is answered")
	case <-time.After(30 * time.Second):
		t.Fatal("the request in flight was never answered")
	}

	// 5. Then the relay stops within its share, releases its claim, and the
	// process exits 0.
	require.Equal(t, 0, p.Wait(t, 60*time.Second).ExitCode(), p.Stderr.String())
	p.LogLines(t)
	var lateRows, leased int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM labeling_rules WHERE id = $1`, lateRule).Scan(&lateRows))
	require.Zero(t, lateRows, "a request that arrived after SIGTERM was never committed")
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events
		WHERE processed_at IS NULL AND failed_at IS NULL AND claimed_until > $1`, time.Now().UnixMilli()).Scan(&leased))
	require.Zero(t, leased, "no unsettled row keeps a future claimed_until")
	var active bool
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT active FROM labeling_rules WHERE id = $1`, slow).Scan(&active))
	require.True(t, active)
}

func TestBoundedWork(t *testing.T) {
	t.Parallel()

	for name, bounds := range map[string]map[string]string{
		// Each case sets the other bounds beyond the client's 10s, so only the one
		// it names can answer in time.
		"DB_LOCK_TIMEOUT":      {"DB_LOCK_TIMEOUT": "300ms", "HTTP_REQUEST_TIMEOUT": "15s", "DB_STATEMENT_TIMEOUT": "1h"},
		"HTTP_REQUEST_TIMEOUT": {"DB_LOCK_TIMEOUT": "1h", "HTTP_REQUEST_TIMEOUT": "500ms", "DB_STATEMENT_TIMEOUT": "1h"},
	} {
		t.Run("a request waiting on a lock is answered 503 within "+name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := pgtest.New(t, migrations.Labeling)
			env := baseEnv(db.URL)
			for k, v := range bounds {
				env[k] = v
			}
			p := proctest.Start(t, binary(t), env, "serve")
			base := "http://" + p.ListenAddr(t)
			client := &http.Client{Timeout: 10 * time.Second}
			org, id := uuid.NewString(), uuid.NewString()
			resp, err := client.Post(base+"/v1/orgs/"+org+"/rules", "application/json",
				strings.NewReader(fmt.Sprintf(`{"id":%q,"name":"n","pattern":"p","label":"l"}`, id)))
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, http.StatusCreated, resp.StatusCode)

			tx, err := db.Pool.Begin(ctx)
			require.NoError(t, err)
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = tx.Exec(ctx, `SELECT 1 FROM labeling_rules WHERE id = $1 FOR UPDATE`, id)
			require.NoError(t, err)

			resp, err = client.Post(base+"/v1/orgs/"+org+"/rules/"+id+"/activate", "application/json", nil)
			require.NoError(t, err, "answered, not left waiting for the lock")
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, body.String())
			require.Contains(t, body.String(), `"code":"unavailable"`)
			require.Eventually(t, func() bool {
				var waiting int
				err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
				return err == nil && waiting == 0
			}, 10*time.Second, 10*time.Millisecond, "the pool connection no longer waits either")
		})
	}
}

// hangingBilling is a billing stand-in that never answers a delivery (until
// the test ends or the request is cancelled); each delivery that reaches it is
// signalled on the channel.
func hangingBilling(t *testing.T) (string, <-chan struct{}) {
	t.Helper()
	delivered := make(chan struct{}, 16)
	hang := make(chan struct{})
	billing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		delivered <- struct{}{}
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(billing.Close)
	t.Cleanup(func() { close(hang) })
	return billing.URL, delivered
}

// poster POSTs a JSON body to a path of the labeling at base and returns the
// status, failing t when the request cannot be made.
func poster(t *testing.T, base string) func(path, body string) int {
	client := &http.Client{Timeout: 5 * time.Second}
	return func(path, body string) int {
		resp, err := client.Post(base+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
}

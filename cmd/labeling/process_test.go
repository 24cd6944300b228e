package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/pgtest"
	"github.com/acme/outboxpair/migrations"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "labeling-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var builds sync.Map // tags -> func() (string, error)

// binary builds cmd/labeling once per set of build tags and returns its path.
func binary(t *testing.T, tags string) string {
	t.Helper()
	f, _ := builds.LoadOrStore(tags, sync.OnceValues(func() (string, error) {
		goTool, err := exec.LookPath("go")
		if err != nil {
			return "", fmt.Errorf("the go tool is not on PATH: %w", err)
		}
		out := filepath.Join(binDir, "labeling"+strings.ReplaceAll(tags, ",", "_"))
		cmd := exec.Command(goTool, "build", "-tags", tags, "-o", out, ".")
		if msg, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build: %v\n%s", err, msg)
		}
		return out, nil
	}))
	path, err := f.(func() (string, error))()
	require.NoError(t, err)
	return path
}

// syncBuffer is a buffer the process writes while the test reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type process struct {
	cmd            *exec.Cmd
	stdout, stderr *syncBuffer
	done           chan struct{}
}

// startProcess runs the binary with exactly env (no inherited variables).
func startProcess(t *testing.T, bin string, env map[string]string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(bin, args...), stdout: &syncBuffer{}, stderr: &syncBuffer{}, done: make(chan struct{})}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	require.NoError(t, p.cmd.Start())
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = p.cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", p.stdout, p.stderr)
		}
	})
	return p
}

// exitCode waits for the process to end, failing t after timeout.
func (p *process) exitCode(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("process still running after %s", timeout)
		return -1
	}
}

// logLines decodes stdout, failing t on any line that is not one JSON object.
func (p *process) logLines(t *testing.T) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(p.stdout.String()))
	for sc.Scan() {
		var line map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &line), "stdout line %q is not a JSON object", sc.Text())
		lines = append(lines, line)
	}
	return lines
}

// listenAddr waits for the server's "http listening" log line and returns its
// address; it fails t when the process exits first or the deadline passes.
func (p *process) listenAddr(t *testing.T) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		for _, line := range p.logLines(t) {
			if addr, ok := line["addr"].(string); ok && line["msg"] == "http listening" {
				return addr
			}
		}
		select {
		case <-p.done:
			t.Fatalf("process exited before listening: %s", p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	t.Fatal("process not listening after 30s")
	return ""
}

func baseEnv(databaseURL string) map[string]string {
	return map[string]string{
		"DATABASE_URL": databaseURL,
		"EVENTS_TOKEN": "test-token",
		"HTTP_ADDR":    "127.0.0.1:0",
	}
}

func TestServeProcess(t *testing.T) {
	t.Parallel()

	t.Run("starts, serves the API and readiness, and exits 0 on SIGTERM", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t, migrations.Labeling)
		bin := binary(t, "")
		p := startProcess(t, bin, baseEnv(db.URL), "serve")
		base := "http://" + p.listenAddr(t)
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
		require.Equal(t, exitOK, startProcess(t, bin, healthEnv, "healthcheck").exitCode(t, 30*time.Second))

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

		require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
		require.Equal(t, 0, p.exitCode(t, 30*time.Second), p.stderr.String())
		p.logLines(t) // every line is JSON
		require.Equal(t, exitFail, startProcess(t, bin, healthEnv, "healthcheck").exitCode(t, 30*time.Second),
			"healthcheck fails once the server is gone")
	})

	t.Run("a bad OUTBOX_LEASE stops start-up with a line naming it", func(t *testing.T) {
		t.Parallel()
		env := baseEnv("postgres://postgres@127.0.0.1:1/none")
		env["OUTBOX_LEASE"] = "1s"
		p := startProcess(t, binary(t, ""), env)

		require.Equal(t, exitFail, p.exitCode(t, 30*time.Second))
		stderr := p.stderr.String()
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
		p := startProcess(t, binary(t, ""), env, "serve")

		require.Equal(t, exitFail, p.exitCode(t, 60*time.Second))
		require.Contains(t, p.stderr.String(), "HTTP_ADDR")
	})
}

func TestActivateAfterCommitCrash(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t, migrations.Labeling)
	env := baseEnv(db.URL)
	env["FAILPOINTS"] = "labeling.activate.after-commit=exit"
	p := startProcess(t, binary(t, "failpoints"), env)
	base := "http://" + p.listenAddr(t)
	org, id := uuid.NewString(), uuid.NewString()
	resp, err := http.Post(base+"/v1/orgs/"+org+"/rules", "application/json",
		strings.NewReader(fmt.Sprintf(`{"id":%q,"name":"n","pattern":"p","label":"l"}`, id)))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)

	_, err = http.Post(base+"/v1/orgs/"+org+"/rules/"+id+"/activate", "application/json", nil)

	require.Error(t, err, "the process dies before it answers")
	p.exitCode(t, 30*time.Second)
	ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "killed by the failpoint: %s", p.cmd.ProcessState)
	require.Contains(t, p.stderr.String(), "failpoint labeling.activate.after-commit: exit")
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
		require.False(t, contains(t, binary(t, "")))
	})
	t.Run("a failpoints build reads FAILPOINTS", func(t *testing.T) {
		t.Parallel()
		require.True(t, contains(t, binary(t, "failpoints")))
	})
}

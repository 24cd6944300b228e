package main

import (
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
	"github.com/acme/outboxpair/migrations"
)

func TestServeNATS(t *testing.T) {
	t.Parallel()

	t.Run("with NATS unreachable, serves its API and is ready; the row waits in the outbox", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		dead := l.Addr().String()
		require.NoError(t, l.Close()) // nothing listens there now
		db := pgtest.New(t, migrations.Labeling)
		env := baseEnv(db.URL)
		env["EVENTS_TRANSPORT"] = "nats"
		env["NATS_URL"] = "nats://" + dead
		env["OUTBOX_POLL_INTERVAL"] = "50ms"
		env["OUTBOX_RETRY_BASE"] = "50ms"
		env["OUTBOX_RETRY_MAX"] = "100ms"
		env["OUTBOX_HANDLER_TIMEOUT"] = "1s"
		env["OUTBOX_LEASE"] = "10s"
		p := proctest.Start(t, binary(t), env, "serve")
		base := "http://" + p.ListenAddr(t)
		client := &http.Client{Timeout: 5 * time.Second}
		status := func(method, path string, body string) int {
			req, err := http.NewRequest(method, base+path, strings.NewReader(body))
			require.NoError(t, err)
			resp, err := client.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			return resp.StatusCode
		}
		require.Eventually(t, func() bool { return status(http.MethodGet, "/readyz", "") == http.StatusOK },
			30*time.Second, 20*time.Millisecond, "readiness reflects the database only")
		org, id := "6f1c1b1e-0000-4000-8000-000000000001", "6f1c1b1e-0000-4000-8000-000000000002"
		require.Equal(t, http.StatusCreated, status(http.MethodPost, "/v1/orgs/"+org+"/rules",
			`{"id":"`+id+`","name":"n","pattern":"p","label":"l"}`))
		require.Equal(t, http.StatusOK, status(http.MethodPost, "/v1/orgs/"+org+"/rules/"+id+"/activate", ""))
		require.Eventually(t, func() bool {
			var attempts int
			var processed, failed *int64
			require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT attempts, processed_at, failed_at FROM outbox_events`).
				Scan(&attempts, &processed, &failed))
			require.Nil(t, processed, "nothing can be published")
			require.Nil(t, failed)
			return attempts >= 2
		}, 30*time.Second, 50*time.Millisecond, "the row is retried like any failed delivery")

		p.Signal(t, syscall.SIGTERM)
		require.Equal(t, 0, p.Wait(t, 30*time.Second).ExitCode(), p.Stderr.String())
	})

	t.Run("nats without NATS_URL stops start-up with a line naming it", func(t *testing.T) {
		t.Parallel()
		env := baseEnv("postgres://postgres@127.0.0.1:1/none")
		env["EVENTS_TRANSPORT"] = "nats"
		p := proctest.Start(t, binary(t), env)
		require.Equal(t, exitFail, p.Wait(t, 30*time.Second).ExitCode())
		stderr := p.Stderr.String()
		require.True(t, strings.HasPrefix(stderr, "labeling: NATS_URL: "), stderr)
		require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	})
}

package main

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

func TestNATS(t *testing.T) {
	t.Parallel()

	t.Run("with NATS_URL unreachable, serves and is ready, and exits 0 on SIGTERM", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		dead := l.Addr().String()
		require.NoError(t, l.Close())
		s := startServer(t, env("DATABASE_URL="+pgtest.Empty(t).URL, "EVENTS_TOKEN=x", "HTTP_ADDR=127.0.0.1:0", "NATS_URL=nats://"+dead, "AUTH_DISABLED=true"))
		client := &http.Client{Timeout: 5 * time.Second}
		require.Eventually(t, func() bool {
			resp, err := client.Get("http://" + s.addr + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 30*time.Second, 20*time.Millisecond, "readiness reflects the database only")
		require.Equal(t, 0, s.stop(t), s.Stderr.String())
	})

	t.Run("a bad NATS_URL stops start-up with one line naming it", func(t *testing.T) {
		t.Parallel()
		r := runCmd(t, env("DATABASE_URL=postgres://postgres@127.0.0.1:5432/x", "EVENTS_TOKEN=x", "NATS_URL=localhost:4222"))
		require.Equal(t, 1, r.code)
		require.True(t, strings.HasPrefix(r.stderr, "billing: NATS_URL: "), r.stderr)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
	})

	t.Run("nats failed prints each terminated message on one line", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t, migrations.Billing)
		_, err := db.Pool.Exec(context.Background(), `INSERT INTO billing_nats_failed
			(stream_seq, subject, msg_id, payload, reason, deliveries, failed_at) VALUES
			(7, 'labeling.events.RuleActivated', 'm-7', '{', $1, 1, 1767225600000)`, "body is not\tvalid\nJSON")
		require.NoError(t, err)
		r := runCmd(t, env("DATABASE_URL="+db.URL, "EVENTS_TOKEN=x"), "nats", "failed")
		require.Equal(t, 0, r.code, r.stderr)
		require.Equal(t, "7\tlabeling.events.RuleActivated\tm-7\t1\t2026-01-01T00:00:00Z\tbody is not\\tvalid\\nJSON\n", r.stdout)

		r = runCmd(t, env("DATABASE_URL="+db.URL, "EVENTS_TOKEN=x"), "nats")
		require.Equal(t, 2, r.code, "nats alone is a usage error")
	})
}

package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/natstest"

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

	t.Run("a NATS_CREDS file that is not there stops start-up with one line naming it", func(t *testing.T) {
		t.Parallel()
		r := runCmd(t, env("DATABASE_URL=postgres://postgres@127.0.0.1:5432/x", "EVENTS_TOKEN=x",
			"NATS_URL=nats://127.0.0.1:4222", "NATS_CREDS=/nonexistent/billing.creds"))
		require.Equal(t, 1, r.code)
		require.True(t, strings.HasPrefix(r.stderr, "billing: NATS_CREDS: "), r.stderr)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
	})

	t.Run("serve filters its durable to its handlers' types, so an unknown type never reaches it, and records an unsigned message at once, applying neither", func(t *testing.T) {
		t.Parallel()
		ns := natstest.Start(t)
		js := natstest.StreamWithDurable(t, ns, "billing")
		ctx := context.Background()

		const token = "nats-test-token"
		db := pgtest.New(t, migrations.Billing)
		s := startServer(t, env("DATABASE_URL="+db.URL, "EVENTS_TOKEN="+token, "HTTP_ADDR=127.0.0.1:0",
			"NATS_URL="+ns.ClientURL(), "NATS_MAX_DELIVERIES=2", "AUTH_DISABLED=true"))
		// The durable made before billing (with every subject, as labeling
		// makes it without NATS_CONSUMER_BILLING_TYPES) is updated to billing's
		// handlers' types: the server in this process is 2.10 or later.
		var filter []string
		require.Eventually(t, func() bool {
			c, err := js.Consumer(ctx, stream.Name, "billing")
			require.NoError(t, err)
			filter = stream.Applied(c.CachedInfo().Config)
			return len(filter) == 2
		}, 30*time.Second, 20*time.Millisecond, "billing updates its durable's filter")
		require.Equal(t, []string{"labeling.events.RuleActivated", "labeling.events.RuleDeactivated"}, filter)
		publish := func(typ string, sign bool) string {
			id := uuid.NewString()
			body := fmt.Sprintf(`{"id":%q,"type":%q,"occurredAt":`+occurredNow()+`,"payload":{"orgId":%q,"ruleId":%q}}`, id, typ, uuid.New(), uuid.New())
			msg := nats.NewMsg(stream.Subject(typ))
			msg.Data = []byte(body)
			if sign {
				msg.Header.Set(stream.SignatureHeader, stream.Sign([]byte(token), msg.Subject, id, msg.Data))
			}
			_, err := js.PublishMsg(ctx, msg, jetstream.WithMsgID(id))
			require.NoError(t, err)
			return id
		}
		unsigned := publish("RuleActivated", false)
		unknown := publish("RuleRenamed", true)
		var out string
		require.Eventually(t, func() bool {
			r := runCmd(t, env("DATABASE_URL="+db.URL), "nats", "failed")
			out = r.stdout
			st, err := js.Stream(ctx, stream.Name)
			require.NoError(t, err)
			return strings.Count(out, "\n") == 1 && st.CachedInfo().State.Msgs == 0
		}, 30*time.Second, 100*time.Millisecond, "the unsigned one recorded, and the stream keeps nothing")
		require.Contains(t, out, unsigned)
		require.Contains(t, out, "signature missing")
		require.NotContains(t, out, unknown, "a type billing does not handle is not delivered to it: no nak, no record")
		var receipts int
		require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM billing_receipts`).Scan(&receipts))
		require.Zero(t, receipts)
		require.Equal(t, 0, s.stop(t), s.Stderr.String())
	})

	t.Run("nats failed prints each terminated message on one line", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t, migrations.Billing)
		_, err := db.Pool.Exec(context.Background(), `INSERT INTO billing_nats_failed
			(stream_seq, subject, msg_id, payload, reason, deliveries, failed_at) VALUES
			(7, 'labeling.events.RuleActivated', 'm-7', '{', $1, 1, 1767225600000),
			(8, $2, $3, '{', 'r', 1, 1767225600000)`, "body is not\tvalid\nJSON",
			[]byte("labeling.events.\xc3\x28\\"), []byte("\xffé"))
		require.NoError(t, err)
		r := runCmd(t, env("DATABASE_URL="+db.URL, "EVENTS_TOKEN=x"), "nats", "failed")
		require.Equal(t, 0, r.code, r.stderr)
		require.Equal(t, "7\tlabeling.events.RuleActivated\tm-7\t1\t2026-01-01T00:00:00.000Z\tbody is not\\tvalid\\nJSON\n"+
			"8\tlabeling.events.\\xc3(\\\\\t\\xffé\t1\t2026-01-01T00:00:00.000Z\tr\n", r.stdout,
			"bytes that are not UTF-8 print as \\xNN, losslessly")
		require.Regexp(t, `^database: postgres host=[^\n]+ database=[^\n]+\n$`, r.stderr, "the database it read, on stderr only")

		r = runCmd(t, env("DATABASE_URL="+db.URL, "EVENTS_TOKEN=x"), "nats")
		require.Equal(t, 2, r.code, "nats alone is a usage error")
	})
}

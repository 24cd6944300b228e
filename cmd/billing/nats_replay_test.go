package main

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

// TestNATSReplay: the token fixed, `billing nats replay` applies what billing
// recorded under the wrong one, once, and says what stayed.
func TestNATSReplay(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("applies the records signed with the current token once and prints what stayed", func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, d, migrations.Billing)
			svc := billing.NewService(db.DB, slog.New(slog.DiscardHandler))
			wrong, err := svc.NATSHandler(billing.NATSConfig{Key: []byte("the-wrong-token")})
			require.NoError(t, err)
			org := uuid.New()
			record := func(seq uint64, key string) {
				id := uuid.Must(uuid.NewV7()).String()
				body := fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":%d,"payload":{"orgId":%q,"ruleId":%q}}`,
					id, time.Now().UnixMilli(), org, uuid.New())
				subject := "labeling.events.RuleActivated"
				err := wrong(context.Background(), stream.Message{Subject: subject, MsgID: id, Data: []byte(body),
					Sequence: seq, Stored: time.Now(), Delivered: 1, Signature: stream.Sign([]byte(key), subject, id, []byte(body))})
				require.True(t, stream.IsTerminal(err), "got %v", err)
			}
			record(1, "labelings-token")
			record(2, "labelings-token")
			record(3, "a-forger")
			quota := func() int {
				return db.Count(t, `SELECT coalesce(sum(active_rules), 0) FROM billing_quota`)
			}
			vars := env("DATABASE_URL="+db.URL, "EVENTS_TOKEN=labelings-token", "EVENTS_TOKEN_PREVIOUS=the-wrong-token")

			r := runCmd(t, vars, "nats", "replay", "--all")
			require.Equal(t, 0, r.code, r.stderr)
			require.Equal(t, "replayed 2 of 3 records\n1 stayed: signature invalid under the current keys\n", r.stdout)
			require.Equal(t, 2, quota())
			require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM billing_nats_failed`))

			r = runCmd(t, vars, "nats", "replay", "--all")
			require.Equal(t, 0, r.code, r.stderr)
			require.Equal(t, "replayed 0 of 1 records\n1 stayed: signature invalid under the current keys\n", r.stdout)
			require.Equal(t, 2, quota(), "nothing applied twice")

			r = runCmd(t, vars, "nats", "replay", "1", "3")
			require.Equal(t, 0, r.code, r.stderr)
			require.Equal(t, "replayed 0 of 2 records\n1 stayed: no such record\n1 stayed: signature invalid under the current keys\n", r.stdout,
				"record 1 is gone: an unknown id counts among the records, as stayed")
		})
	})

	t.Run("is a usage error without ids, with ids beside --all, or with an id that is not one", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"nats", "replay"}, {"nats", "replay", "--all", "1"}, {"nats", "replay", "x"}, {"nats", "replay", "0"}} {
			r := runCmd(t, env("EVENTS_TOKEN=t"), args...)
			require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
		}
	})

	t.Run("needs EVENTS_TOKEN", func(t *testing.T) {
		t.Parallel()
		r := runCmd(t, env("DATABASE_URL=sqlite:"+t.TempDir()+"/b.db"), "nats", "replay", "--all")
		require.Equal(t, 1, r.code)
		require.Contains(t, r.stderr, "EVENTS_TOKEN")
	})
}

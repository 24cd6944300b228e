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
			require.Regexp(t, `^database: `+string(d)+` [^\n]+\n`, r.stderr, "the database it replayed into, first, on stderr")
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

	t.Run("is a usage error without ids, with ids beside --all, with an id that is not one, or --after without --all", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"nats", "replay"}, {"nats", "replay", "--all", "1"}, {"nats", "replay", "x"}, {"nats", "replay", "0"},
			{"nats", "replay", "--after", "3", "1"}, {"nats", "replay", "--all", "--after", "-1"}, {"nats", "replay", "--all", "--after", "x"}} {
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

// TestNATSReplayResumes: `billing nats replay --all` commits batch by batch;
// a run that cannot finish says where it stopped and how to resume.
func TestNATSReplayResumes(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("a run that cannot finish keeps the batches it committed and prints the command that resumes after them", func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, d, migrations.Billing)
			svc := billing.NewService(db.DB, slog.New(slog.DiscardHandler))
			wrong, err := svc.NATSHandler(billing.NATSConfig{Key: []byte("the-wrong-token")})
			require.NoError(t, err)
			org, blocked := uuid.New(), uuid.New()
			record := func(seq uint64, org uuid.UUID) {
				id := uuid.Must(uuid.NewV7()).String()
				body := fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":%d,"payload":{"orgId":%q,"ruleId":%q}}`,
					id, time.Now().UnixMilli(), org, uuid.New())
				subject := "labeling.events.RuleActivated"
				err := wrong(context.Background(), stream.Message{Subject: subject, MsgID: id, Data: []byte(body),
					Sequence: seq, Stored: time.Now(), Delivered: 1, Signature: stream.Sign([]byte("labelings-token"), subject, id, []byte(body))})
				require.True(t, stream.IsTerminal(err), "got %v", err)
			}
			// Records 1 to 501, then 502 for an org whose apply fails: the
			// second batch (501, 502) stops the run.
			for i := range 501 {
				record(uint64(i+1), org)
			}
			record(502, blocked)
			if d == sqldb.SQLite {
				db.Exec(t, fmt.Sprintf(`CREATE TRIGGER blocked BEFORE INSERT ON billing_quota WHEN NEW.org_id = '%s'
					BEGIN SELECT RAISE(ABORT, 'blocked'); END`, blocked))
			} else {
				db.Exec(t, fmt.Sprintf(`CREATE FUNCTION blocked() RETURNS trigger LANGUAGE plpgsql AS $$
					BEGIN IF NEW.org_id = '%s' THEN RAISE EXCEPTION 'blocked'; END IF; RETURN NEW; END $$`, blocked))
				db.Exec(t, `CREATE TRIGGER blocked BEFORE INSERT ON billing_quota FOR EACH ROW EXECUTE FUNCTION blocked()`)
			}
			quota := func(org uuid.UUID) int {
				return db.Count(t, `SELECT coalesce(sum(active_rules), 0) FROM billing_quota WHERE org_id = $1`, org.String())
			}
			vars := env("DATABASE_URL="+db.URL, "EVENTS_TOKEN=labelings-token")

			r := runCmd(t, vars, "nats", "replay", "--all")
			require.Equal(t, 1, r.code, r.stderr)
			require.Equal(t, "replayed 500 of 502 records\n", r.stdout, "the first batch of 500 done")
			require.Contains(t, r.stderr, "stopped after record 500, resume with: billing nats replay --all --after 500")
			require.Equal(t, 501, quota(org), "501 applied alone before 502 failed; its record left")
			require.Equal(t, 2, db.Count(t, `SELECT count(*) FROM billing_nats_failed`))

			db.Exec(t, `DROP TRIGGER blocked`+map[sqldb.Dialect]string{sqldb.SQLite: ``, sqldb.Postgres: ` ON billing_quota`}[d])
			r = runCmd(t, vars, "nats", "replay", "--all", "--after", "500")
			require.Equal(t, 0, r.code, r.stderr)
			require.Equal(t, "replayed 2 of 2 records\n", r.stdout)
			require.Equal(t, 501, quota(org), "501 found applied: applied once")
			require.Equal(t, 1, quota(blocked))
			require.Zero(t, db.Count(t, `SELECT count(*) FROM billing_nats_failed`))
		})
	})

}

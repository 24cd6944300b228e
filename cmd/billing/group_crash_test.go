package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

// TestGroupCrash kills the real process at each billing failpoint while a group
// of several deliveries is in its transaction, restarts it, redelivers
// everything, and requires each event applied exactly once: nothing lost,
// nothing twice. The group is formed on purpose: the test holds the quota row of
// a first delivery, so its transaction stays in flight while the others arrive
// and wait (billing_apply_waiting shows them), then lets it go. "1*exit" lets
// that first lone transaction (or its answer) pass, so the kill lands on the
// group.
func TestGroupCrash(t *testing.T) {
	t.Parallel()

	const tok = "group-crash-token"
	const followers = 5
	cases := []struct {
		name, point string
		nats        bool
		committed   bool // the group's receipts are there after the kill
	}{
		{name: "killed before the group's commit over HTTP: none of the group applied, each redelivery applies once",
			point: failpoint.BillingEventsBeforeCommit},
		{name: "killed after the group's commit over HTTP: all of the group applied together, redeliveries change nothing",
			point: failpoint.BillingEventsAfterCommit, committed: true},
		{name: "killed before the group's commit over NATS: none of the group applied, the redeliveries apply each once",
			point: failpoint.BillingEventsBeforeCommit, nats: true},
		{name: "killed after the group's commit over NATS, before the acks: all applied, the redeliveries change nothing",
			point: failpoint.BillingNATSAfterCommit, nats: true, committed: true},
	}
	for _, dialect := range dbtest.Dialects {
		for _, tc := range cases {
			t.Run(string(dialect)+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				var db *dbtest.DB
				if dialect == sqldb.SQLite {
					db = dbtest.New(t, dialect, migrations.Billing)
				} else {
					pg := pgtest.Empty(t)
					db = &dbtest.DB{URL: pg.URL, Pool: pg.Pool}
				}
				vars := []string{"DATABASE_URL=" + db.URL, "EVENTS_TOKEN=" + tok, "HTTP_ADDR=127.0.0.1:0", "AUTH_DISABLED=true",
					// On SQLite the first delivery waits for the write lock the test
					// holds: longer than the default busy timeout.
					"DB_LOCK_TIMEOUT=30s", "DB_STATEMENT_TIMEOUT=30s"}
				var js jetstream.JetStream
				if tc.nats {
					url := jetStream(t)
					js = jsClient(t, url)
					_, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
						Name: "LABELING_EVENTS", Subjects: []string{"labeling.events.>"}, Storage: jetstream.FileStorage,
					})
					require.NoError(t, err)
					vars = append(vars, "NATS_URL="+url, "NATS_ACK_WAIT=1s")
				}
				s := startBinary(t, failpointBinary(t), env(append(vars, "FAILPOINTS="+tc.point+"=1*exit")...))

				// The first delivery's quota row, held by the test (on SQLite the
				// write lock itself, which the test takes on its own connection).
				held := uuid.New()
				db.Exec(t, `INSERT INTO billing_quota (org_id, active_rules, updated_at) VALUES ($1, 0, 0)`, held)
				var release func() error
				if dialect == sqldb.SQLite {
					hold, err := db.SQLite.Write.BeginTx(ctx, nil) // BEGIN IMMEDIATE
					require.NoError(t, err)
					release = hold.Rollback
				} else {
					hold, err := db.Pool.Begin(ctx)
					require.NoError(t, err)
					_, err = hold.Exec(ctx, `SELECT 1 FROM billing_quota WHERE org_id = $1 FOR UPDATE`, held)
					require.NoError(t, err)
					release = func() error { return hold.Rollback(ctx) }
				}
				defer func() { _ = release() }()

				type delivery struct{ id, org uuid.UUID }
				all := []delivery{{uuid.Must(uuid.NewV7()), held}}
				for range followers {
					all = append(all, delivery{uuid.Must(uuid.NewV7()), uuid.New()})
				}
				body := func(d delivery) string {
					return fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":`+occurredNow()+`,"payload":{"orgId":%q,"ruleId":%q}}`, d.id, d.org, uuid.New())
				}
				// send delivers d: over HTTP in the background (its status, 0 when the
				// process died under it, arrives on the channel), or published.
				answers := make([]chan int, len(all))
				send := func(i int) {
					d := all[i]
					if tc.nats {
						m := nats.NewMsg("labeling.events.RuleActivated")
						m.Header.Set(nats.MsgIdHdr, d.id.String())
						m.Data = []byte(body(d))
						m.Header.Set(stream.SignatureHeader, stream.Sign([]byte(tok), m.Subject, d.id.String(), m.Data))
						_, err := js.PublishMsg(ctx, m)
						require.NoError(t, err)
						return
					}
					answers[i] = make(chan int, 1)
					go func() {
						code, err := postEvent(s.addr, tok, body(d))
						if err != nil {
							code = 0
						}
						answers[i] <- code
					}()
				}

				send(0)
				if dialect == sqldb.SQLite {
					// No lock view on SQLite: the first delivery's group (of one)
					// is counted as its transaction starts, which then waits for
					// the held lock.
					require.Eventually(t, func() bool { return metric(s.addr, "billing_apply_group_size_count", "") == 1 }, 20*time.Second, 5*time.Millisecond,
						"the first delivery's transaction waits for the held lock")
					for i := 1; i < len(all); i++ {
						send(i)
					}
				} else {
					require.Eventually(t, func() bool { return lockWaiters(t, db.URL) == 1 }, 20*time.Second, 5*time.Millisecond,
						"the first delivery's transaction waits for the held row")
					for i := 1; i < len(all); i++ {
						send(i)
					}
				}
				require.Eventually(t, func() bool { return metric(s.addr, "billing_apply_waiting", "") == followers }, 20*time.Second, 5*time.Millisecond,
					"the others wait behind it, to form one group")
				require.NoError(t, release())

				state := s.Wait(t, 30*time.Second)
				ws, ok := state.Sys().(syscall.WaitStatus)
				require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "want death by SIGKILL, got %v", state)
				require.Contains(t, s.Stderr.String(), "failpoint "+tc.point+": exit")

				receipts := func() map[uuid.UUID]bool {
					rows := db.Query(t, `SELECT event_id FROM billing_receipts`)
					got := map[uuid.UUID]bool{}
					for rows.Next() {
						var id uuid.UUID
						require.NoError(t, rows.Scan(&id))
						got[id] = true
					}
					require.NoError(t, rows.Err())
					return got
				}
				got := receipts()
				require.True(t, got[all[0].id], "the first delivery committed alone, before the group")
				for _, d := range all[1:] {
					require.Equal(t, tc.committed, got[d.id], "the group committed together or not at all")
				}
				if !tc.nats {
					for i, ch := range answers {
						if code := <-ch; code == http.StatusNoContent {
							require.True(t, got[all[i].id], "delivery %d was answered 204 only after its commit", i)
						} else if i > 0 {
							require.Zero(t, code, "delivery %d: the process died before answering", i)
						}
					}
				}

				// Restarted without failpoints: over HTTP the sender retries every
				// delivery (twice, to be sure a retry changes nothing); over NATS the
				// unacked messages come back after NATS_ACK_WAIT.
				r := startServer(t, env(vars...))
				if tc.nats {
					// The group's messages were never acked: each comes back and is
					// applied now (killed before the commit) or found applied.
					outcome := `outcome="applied"`
					if tc.committed {
						outcome = `outcome="already_applied"`
					}
					require.Eventually(t, func() bool {
						return len(receipts()) == len(all) && metric(r.addr, "billing_events_total", outcome) >= followers
					},
						30*time.Second, 20*time.Millisecond, "every unacked message is redelivered and applied or found applied")
				} else {
					for range 2 {
						for _, d := range all {
							code, err := postEvent(r.addr, tok, body(d))
							require.NoError(t, err)
							require.Equal(t, http.StatusNoContent, code)
						}
					}
				}
				require.Equal(t, 0, r.stop(t), r.Stderr.String())

				require.Len(t, receipts(), len(all))
				for _, d := range all {
					var n int64
					require.NoError(t, db.QueryRow(`SELECT active_rules FROM billing_quota WHERE org_id = $1`, d.org).Scan(&n))
					require.EqualValues(t, 1, n, "event %s applied exactly once", d.id)
				}
			})
		}
	}
}

func postEvent(addr, tok, body string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/internal/v1/events", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// lockWaiters counts the transactions of the database at url waiting for a lock.
func lockWaiters(t *testing.T, url string) int {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var n int
	require.NoError(t, conn.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n))
	return n
}

// metric sums the samples of metric name whose labels contain label (all of
// them when label is empty) on the server at addr; -1 when unreadable.
func metric(addr, name, label string) float64 {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	sum := 0.0
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `(\{[^}]*\})? ([0-9.e+-]+)$`)
	for _, m := range re.FindAllStringSubmatch(string(b), -1) {
		if strings.Contains(m[1], label) {
			v, err := strconv.ParseFloat(m[2], 64)
			if err == nil {
				sum += v
			}
		}
	}
	return sum
}

// jetStream runs a JetStream server in the test process and returns its URL.
func jetStream(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	s, err := natsserver.NewServer(&natsserver.Options{Host: "127.0.0.1", Port: port, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats server ready")
	t.Cleanup(s.Shutdown)
	return s.ClientURL()
}

func jsClient(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

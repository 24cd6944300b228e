package inbox_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/inboxtest"
)

// The ledger is a second consumer, example/ledger, the package
// docs/adopting.md walks through: it proves that infra/inbox is reusable with
// no copy of billing's code, on its Go-function effect (Effect.Func) where
// billing takes the PostgreSQL fast path. Where billing adds a delta to a
// counter per org, the ledger appends one row per RuleActivated event to a
// table of its own (ledger_entries), with its own receipts (ledger_receipts)
// and dead letters (ledger_nats_failed). These tests add a trigger of their
// own that refuses an entry for an org not in ledger_open_orgs, which is how
// a test makes the effect fail, and later succeed, on both dialects.

// entry is what a RuleActivated event does to the ledger.
type entry = ledger.Entry

// org is the org a test names: a fixed id per name.
func org(name string) uuid.UUID {
	return uuid.NewSHA1(uuid.NameSpaceOID, []byte("ledger-test-org-"+name))
}

// ledgerConsumer is the example's consumer with metrics named name (each
// test its own, so that parallel tests do not share series).
func ledgerConsumer(name string) inbox.Consumer[entry] {
	c := ledger.Consumer()
	c.Name = name
	return c
}

// ledgerTables adds the test's trigger to a database the ledger's migrations
// made: an entry needs its org in ledger_open_orgs.
func ledgerTables(t testing.TB, db *dbtest.DB) {
	t.Helper()
	if db.Dialect() == sqldb.SQLite {
		db.Exec(t, `CREATE TABLE ledger_open_orgs (org_id TEXT PRIMARY KEY)`)
		db.Exec(t, `CREATE TRIGGER ledger_open BEFORE INSERT ON ledger_entries
			WHEN NOT EXISTS (SELECT 1 FROM ledger_open_orgs WHERE org_id = NEW.org_id)
			BEGIN SELECT RAISE(ABORT, 'org closed'); END`)
		return
	}
	db.Exec(t, `CREATE TABLE ledger_open_orgs (org_id uuid PRIMARY KEY)`)
	db.Exec(t, `CREATE FUNCTION ledger_open() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NOT EXISTS (SELECT 1 FROM ledger_open_orgs WHERE org_id = NEW.org_id) THEN
				RAISE EXCEPTION 'org closed';
			END IF;
			RETURN NEW;
		END $$`)
	db.Exec(t, `CREATE TRIGGER ledger_open BEFORE INSERT ON ledger_entries FOR EACH ROW EXECUTE FUNCTION ledger_open()`)
}

// openOrg lets entries of the org named name in.
func openOrg(t testing.TB, db *dbtest.DB, name string) {
	t.Helper()
	db.Exec(t, `INSERT INTO ledger_open_orgs (org_id) VALUES ($1)`, org(name).String())
}

// setupLedger is the ledger on a fresh database of dialect d migrated by its
// own migrations, orgs "open" and "other" open, with metrics named name: the
// one setup of this file's tests.
func setupLedger(t testing.TB, d sqldb.Dialect, name string, opts ...inbox.Option) *inboxtest.Env[entry] {
	t.Helper()
	db := dbtest.New(t, d, ledger.Migrations)
	ledgerTables(t, db)
	openOrg(t, db, "open")
	openOrg(t, db, "other")
	return inboxtest.New(t, db, ledgerConsumer(name), opts...)
}

// activation is the envelope of a RuleActivated event of the org named name.
func activation(id uuid.UUID, name string) string {
	return inboxtest.Envelope(id, ledger.EventType, activationPayload(name))
}

// activationPayload is a RuleActivated payload of the org named name.
func activationPayload(name string) string {
	return fmt.Sprintf(`{"orgId":%q,"ruleId":%q}`, org(name), uuid.New())
}

// entries is how many ledger_entries rows event id has.
func entries(t testing.TB, env *inboxtest.Env[entry], id uuid.UUID) int {
	t.Helper()
	return env.DB.Count(t, `SELECT count(*) FROM ledger_entries WHERE event_id = $1`, id.String())
}

// receipts is how many ledger_receipts rows event id has.
func receipts(t testing.TB, env *inboxtest.Env[entry], id uuid.UUID) int {
	t.Helper()
	return env.DB.Count(t, `SELECT count(*) FROM ledger_receipts WHERE event_id = $1`, id.String())
}

func TestLedgerDelivery(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("a delivery applies its effect once with its receipt; redeliveries apply nothing", func(t *testing.T) {
			t.Parallel()
			env := setupLedger(t, d, "ledger_delivery_"+string(d))
			id := uuid.Must(uuid.NewV7())
			for range 3 {
				rec := env.Deliver(t, activation(id, "open"))
				require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
			}
			require.Equal(t, 1, entries(t, env, id))
			require.Equal(t, 1, receipts(t, env, id))
			var orgID string
			require.NoError(t, env.DB.QueryRow(`SELECT org_id FROM ledger_entries WHERE event_id = $1`, id.String()).Scan(&orgID))
			require.Equal(t, org("open").String(), orgID)
		})

		t.Run("a type the ledger has no handler for is 501 and writes nothing; a bad payload is 400", func(t *testing.T) {
			t.Parallel()
			env := setupLedger(t, d, "ledger_refused_"+string(d))
			id := uuid.Must(uuid.NewV7())
			rec := env.Deliver(t, inboxtest.Envelope(id, "RuleDeactivated", activationPayload("open")))
			require.Equal(t, http.StatusNotImplemented, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), "not handled by ledger_refused_")
			rec = env.Deliver(t, inboxtest.Envelope(id, ledger.EventType, fmt.Sprintf(`{"orgId":%q}`, org("open"))))
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			require.Zero(t, receipts(t, env, id))
			require.Zero(t, env.DB.Count(t, `SELECT count(*) FROM ledger_entries`))
		})

		t.Run("the intake keeps the events token", func(t *testing.T) {
			t.Parallel()
			env := setupLedger(t, d, "ledger_token_"+string(d))
			id := uuid.Must(uuid.NewV7())
			rec := env.Deliver(t, activation(id, "open"), func(r *http.Request) { r.Header.Set("Authorization", "Bearer wrong") })
			require.Equal(t, http.StatusUnauthorized, rec.Code)
			require.Equal(t, `Bearer realm="ledger_token_`+string(d)+`"`, rec.Header().Get("WWW-Authenticate"))
			require.Zero(t, receipts(t, env, id))
		})
	})
}

func TestLedgerEffectFailure(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("an effect that fails rolls its receipt back; once it can apply, a redelivery applies it once", func(t *testing.T) {
			t.Parallel()
			env := setupLedger(t, d, "ledger_fail_"+string(d))
			id := uuid.Must(uuid.NewV7())
			rec := env.Deliver(t, activation(id, "later"))
			require.Equal(t, http.StatusInternalServerError, rec.Code, rec.Body.String())
			require.Zero(t, receipts(t, env, id), "no receipt without its effect")
			require.Zero(t, entries(t, env, id))

			openOrg(t, env.DB, "later")
			for range 2 {
				require.Equal(t, http.StatusNoContent, env.Deliver(t, activation(id, "later")).Code)
			}
			require.Equal(t, 1, entries(t, env, id))
			require.Equal(t, 1, receipts(t, env, id))
		})

		t.Run("in a group, an event whose effect fails fails alone: the others apply", func(t *testing.T) {
			t.Parallel()
			env := setupLedger(t, d, "ledger_groupfail_"+string(d))
			bad := uuid.Must(uuid.NewV7())
			good := []uuid.UUID{uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())}
			release := hold(t, env)
			results := []<-chan error{
				applyAsync(env, bad, "closed"),
				applyAsync(env, good[0], "open"),
				applyAsync(env, good[1], "open"),
			}
			require.Eventually(t, func() bool { return env.Inbox.Waiting() == 2 }, 10*time.Second, time.Millisecond,
				"two deliveries wait for the next group")
			release()
			var failed int
			for _, ch := range results {
				if err := <-ch; err != nil {
					failed++
				}
			}
			require.Equal(t, 1, failed, "only the bad event fails")
			require.Zero(t, receipts(t, env, bad))
			for _, id := range good {
				require.Equal(t, 1, entries(t, env, id))
				require.Equal(t, 1, receipts(t, env, id))
			}
		})
	})
}

func TestLedgerGroupApply(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("deliveries that arrive while a transaction is in flight commit together in the next, each once", func(t *testing.T) {
			t.Parallel()
			name := "ledger_group_" + string(d)
			env := setupLedger(t, d, name)
			release := hold(t, env)
			const followers = 5
			ids := make([]uuid.UUID, followers+1)
			results := make([]<-chan error, followers+1)
			for i := range ids {
				ids[i] = uuid.Must(uuid.NewV7())
				results[i] = applyAsync(env, ids[i], "open")
				if i > 0 {
					// Whichever came first leads and waits on the held lock;
					// each other call queues behind it.
					require.Eventually(t, func() bool { return env.Inbox.Waiting() == i }, 10*time.Second, time.Millisecond,
						"delivery %d waits for the next group", i)
				}
			}
			release()
			for _, ch := range results {
				require.NoError(t, <-ch)
			}
			count, sum := groupSizes(t, name)
			require.EqualValues(t, 2, count, "two transactions: the leader's, then one group of every follower")
			require.EqualValues(t, followers+1, sum)
			for _, id := range ids {
				require.Equal(t, 1, entries(t, env, id))
			}
			// A redelivery of a grouped event applies nothing.
			applied, err := apply(env, ids[3], "open")
			require.NoError(t, err)
			require.False(t, applied)
			require.Equal(t, 1, entries(t, env, ids[3]))
		})
	})
}

// hold keeps every apply of env waiting until release: on PostgreSQL a
// transaction of the test's holds a lock on ledger_receipts that an insert
// waits for; on SQLite a second connection holds the file's write lock.
func hold(t testing.TB, env *inboxtest.Env[entry]) (release func()) {
	t.Helper()
	ctx := context.Background()
	done := make(chan struct{})
	var finished <-chan error
	if env.DB.Pool != nil {
		tx, err := env.DB.Pool.Begin(ctx)
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `LOCK TABLE ledger_receipts IN SHARE MODE`)
		require.NoError(t, err)
		ch := make(chan error, 1)
		go func() { <-done; ch <- tx.Rollback(ctx) }()
		finished = ch
	} else {
		other, err := sqlite.Open(ctx, env.DB.URL, sqldb.Bounds{StatementTimeout: 30 * time.Second, LockTimeout: 10 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { other.Close() })
		locked := make(chan struct{})
		ch := make(chan error, 1)
		go func() {
			ch <- other.InTx(ctx, sqldb.TxOptions{}, func(sqlite.Tx) error { close(locked); <-done; return nil })
		}()
		<-locked
		finished = ch
	}
	once := false
	release = func() {
		if !once {
			once = true
			close(done)
			require.NoError(t, <-finished)
		}
	}
	t.Cleanup(release)
	return release
}

// apply applies a RuleActivated event of the org named account through the inbox.
func apply(env *inboxtest.Env[entry], id uuid.UUID, account string) (bool, error) {
	return env.Inbox.Apply(context.Background(), inbox.Event[entry]{ID: id, Type: ledger.EventType, OccurredAt: time.Now().UnixMilli(),
		Value: entry{OrgID: org(account), RuleID: uuid.New()}})
}

// applyAsync is apply in the background; its error arrives on the channel.
func applyAsync(env *inboxtest.Env[entry], id uuid.UUID, account string) <-chan error {
	ch := make(chan error, 1)
	go func() {
		_, err := apply(env, id, account)
		ch <- err
	}()
	return ch
}

// groupSizes reads NAME_apply_group_size: how many transactions, and how
// many events they carried.
func groupSizes(t testing.TB, name string) (count uint64, sum float64) {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == name+"_apply_group_size" {
			h := f.GetMetric()[0].GetHistogram()
			return h.GetSampleCount(), h.GetSampleSum()
		}
	}
	t.Fatalf("no metric %s_apply_group_size", name)
	return 0, 0
}

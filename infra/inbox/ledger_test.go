package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/inboxtest"
	"github.com/acme/outboxpair/migrations"
)

// The ledger is a second consumer, defined here and nowhere else: it proves
// that infra/inbox is reusable with no copy of billing's code. Where billing
// adds a delta to a counter per org, the ledger appends one row per event to a
// table of its own (ledger_entries), with its own receipts (ledger_receipts)
// and dead letters (ledger_nats_failed). Its effect refuses an entry for an
// account not in ledger_accounts (a trigger), which is how a test makes the
// effect fail, and later succeed, on both dialects.

// entry is what a Credited event does: one row of ledger_entries.
type entry struct {
	Account string
	Amount  int64
}

// creditPayload is the part of a Credited event the ledger reads.
type creditPayload struct {
	Account *string `json:"account"`
	Amount  *int64  `json:"amount"`
}

const credited = "Credited"

// ledger is the consumer; name names its metrics (each test its own, so that
// parallel tests do not share series).
func ledger(name string) inbox.Consumer[entry] {
	return inbox.Consumer[entry]{
		Name:       name,
		Receipts:   "ledger_receipts",
		NATSFailed: "ledger_nats_failed",
		Handlers: []inbox.Handler[entry]{inbox.Handle(credited, func(p creditPayload) (entry, error) {
			if p.Account == nil || *p.Account == "" || p.Amount == nil {
				return entry{}, errors.New("account and amount are required")
			}
			return entry{Account: *p.Account, Amount: *p.Amount}, nil
		})},
		Effect: inbox.Effect[entry]{
			Postgres: inbox.PostgresEffect[entry]{
				Columns: []string{"account text", "amount bigint"},
				Args: func(events []inbox.Event[entry]) []any {
					accounts := make([]string, len(events))
					amounts := make([]int64, len(events))
					for i, e := range events {
						accounts[i], amounts[i] = e.Value.Account, e.Value.Amount
					}
					return []any{accounts, amounts}
				},
				Statements: []string{`INSERT INTO ledger_entries (event_id, account, amount, created_at)
					SELECT event_id, account, amount, $1 FROM applied ORDER BY event_id`},
			},
			SQLite: func(ctx context.Context, tx sqlite.Tx, fresh []inbox.Event[entry], now int64) error {
				for _, e := range fresh {
					if _, err := tx.Exec(ctx, `INSERT INTO ledger_entries (event_id, account, amount, created_at) VALUES (?1, ?2, ?3, ?4)`,
						e.ID, e.Value.Account, e.Value.Amount, now); err != nil {
						return err
					}
				}
				return nil
			},
		},
		// The same crash points as billing's (contract section 6), passed by
		// the inbox for any consumer that names them.
		Failpoints: inbox.Failpoints{
			BeforeCommit:    failpoint.BillingEventsBeforeCommit,
			AfterCommit:     failpoint.BillingEventsAfterCommit,
			NATSAfterCommit: failpoint.BillingNATSAfterCommit,
		},
	}
}

// ledgerTables creates the ledger's own tables beside its receipts and dead
// letters: its entries, and the accounts an entry needs (the trigger).
func ledgerTables(t testing.TB, db *dbtest.DB) {
	t.Helper()
	inboxtest.Tables(t, db, "ledger_receipts", "ledger_nats_failed")
	if db.Dialect() == sqldb.SQLite {
		db.Exec(t, `CREATE TABLE ledger_accounts (account TEXT PRIMARY KEY)`)
		db.Exec(t, `CREATE TABLE ledger_entries (event_id TEXT PRIMARY KEY, account TEXT NOT NULL, amount INTEGER NOT NULL, created_at INTEGER NOT NULL)`)
		db.Exec(t, `CREATE TRIGGER ledger_open BEFORE INSERT ON ledger_entries
			WHEN NOT EXISTS (SELECT 1 FROM ledger_accounts WHERE account = NEW.account)
			BEGIN SELECT RAISE(ABORT, 'account closed'); END`)
		return
	}
	db.Exec(t, `CREATE TABLE ledger_accounts (account text PRIMARY KEY)`)
	db.Exec(t, `CREATE TABLE ledger_entries (event_id uuid PRIMARY KEY, account text NOT NULL, amount bigint NOT NULL, created_at bigint NOT NULL)`)
	db.Exec(t, `CREATE FUNCTION ledger_open() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NOT EXISTS (SELECT 1 FROM ledger_accounts WHERE account = NEW.account) THEN
				RAISE EXCEPTION 'account closed';
			END IF;
			RETURN NEW;
		END $$`)
	db.Exec(t, `CREATE TRIGGER ledger_open BEFORE INSERT ON ledger_entries FOR EACH ROW EXECUTE FUNCTION ledger_open()`)
}

// setupLedger is the ledger on a fresh database of dialect d, its accounts
// "open" and "other" open, with metrics named name: the one setup of this
// file's tests.
func setupLedger(t testing.TB, d sqldb.Dialect, name string, opts ...inbox.Option) *inboxtest.Env[entry] {
	t.Helper()
	db := dbtest.New(t, d, migrations.Billing) // a migrated database; the ledger's tables are its own
	ledgerTables(t, db)
	db.Exec(t, `INSERT INTO ledger_accounts (account) VALUES ('open'), ('other')`)
	return inboxtest.New(t, db, ledger(name), opts...)
}

// credit is the envelope of a Credited event.
func credit(id uuid.UUID, account string, amount int64) string {
	return inboxtest.Envelope(id, credited, fmt.Sprintf(`{"account":%q,"amount":%d}`, account, amount))
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
				rec := env.Deliver(t, credit(id, "open", 5))
				require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
			}
			require.Equal(t, 1, entries(t, env, id))
			require.Equal(t, 1, receipts(t, env, id))
			var amount int64
			require.NoError(t, env.DB.QueryRow(`SELECT amount FROM ledger_entries WHERE event_id = $1`, id.String()).Scan(&amount))
			require.EqualValues(t, 5, amount)
		})

		t.Run("a type the ledger has no handler for is 501 and writes nothing; a bad payload is 400", func(t *testing.T) {
			t.Parallel()
			env := setupLedger(t, d, "ledger_refused_"+string(d))
			id := uuid.Must(uuid.NewV7())
			rec := env.Deliver(t, inboxtest.Envelope(id, "RuleActivated", `{"orgId":"x"}`))
			require.Equal(t, http.StatusNotImplemented, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), "not handled by ledger_refused_")
			rec = env.Deliver(t, inboxtest.Envelope(id, credited, `{"account":"open"}`))
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			require.Zero(t, receipts(t, env, id))
			require.Zero(t, env.DB.Count(t, `SELECT count(*) FROM ledger_entries`))
		})

		t.Run("the intake keeps the events token", func(t *testing.T) {
			t.Parallel()
			env := setupLedger(t, d, "ledger_token_"+string(d))
			id := uuid.Must(uuid.NewV7())
			rec := env.Deliver(t, credit(id, "open", 1), func(r *http.Request) { r.Header.Set("Authorization", "Bearer wrong") })
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
			rec := env.Deliver(t, credit(id, "later", 7))
			require.Equal(t, http.StatusInternalServerError, rec.Code, rec.Body.String())
			require.Zero(t, receipts(t, env, id), "no receipt without its effect")
			require.Zero(t, entries(t, env, id))

			env.DB.Exec(t, `INSERT INTO ledger_accounts (account) VALUES ('later')`)
			for range 2 {
				require.Equal(t, http.StatusNoContent, env.Deliver(t, credit(id, "later", 7)).Code)
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

// apply applies a Credited event of account through the inbox.
func apply(env *inboxtest.Env[entry], id uuid.UUID, account string) (bool, error) {
	return env.Inbox.Apply(context.Background(), inbox.Event[entry]{ID: id, Type: credited, OccurredAt: time.Now().UnixMilli(),
		Value: entry{Account: account, Amount: 1}})
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

package billing_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

// outcome is what one Apply call returned.
type outcome struct {
	id      uuid.UUID
	applied bool
	err     error
}

func activated(org uuid.UUID) billing.Event {
	return billing.Event{ID: uuid.Must(uuid.NewV7()), Type: billing.RuleActivated, OccurredAt: 1, Value: billing.Effect{OrgID: org, Delta: 1}}
}

// logTransactions records, for every receipt and every quota row written, the
// transaction that wrote it (in committed tables, so only what committed shows),
// and counts every quota row trigger call in a sequence, which a rollback does
// not undo: more calls than committed rows means a transaction was retried.
func (b *bundle) logTransactions(t testing.TB) {
	t.Helper()
	_, err := b.pool.Exec(context.Background(), `
		CREATE TABLE receipt_log (seq bigserial, event_id uuid, tx bigint);
		CREATE TABLE quota_log (seq bigserial, org_id uuid, tx bigint);
		CREATE SEQUENCE quota_calls;
		CREATE FUNCTION log_receipt() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN INSERT INTO receipt_log (event_id, tx) VALUES (NEW.event_id, txid_current()); RETURN NULL; END $$;
		CREATE FUNCTION log_quota() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			PERFORM nextval('quota_calls');
			INSERT INTO quota_log (org_id, tx) VALUES (NEW.org_id, txid_current());
			RETURN NULL;
		END $$;
		CREATE TRIGGER log_receipt AFTER INSERT ON billing_receipts FOR EACH ROW EXECUTE FUNCTION log_receipt();
		CREATE TRIGGER log_quota AFTER INSERT OR UPDATE ON billing_quota FOR EACH ROW EXECUTE FUNCTION log_quota();`)
	require.NoError(t, err)
}

// txOf returns the transaction that wrote event id's receipt.
func (b *bundle) txOf(t testing.TB, id uuid.UUID) int64 {
	t.Helper()
	var tx int64
	require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT tx FROM receipt_log WHERE event_id = $1`, id).Scan(&tx))
	return tx
}

// hold locks org's quota row in a transaction of the test's, so that a
// transaction changing org waits until release.
func (b *bundle) hold(t testing.TB, org uuid.UUID) (release func()) {
	t.Helper()
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, `INSERT INTO billing_quota (org_id, active_rules, updated_at) VALUES ($1, 0, 0)`, org)
	require.NoError(t, err)
	tx, err := b.pool.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM billing_quota WHERE org_id = $1 FOR UPDATE`, org)
	require.NoError(t, err)
	done := false
	release = func() {
		if !done {
			done = true
			require.NoError(t, tx.Rollback(ctx))
		}
	}
	t.Cleanup(release)
	return release
}

// waitLocked waits until n transactions of the test database wait for a lock.
func (b *bundle) waitLocked(t testing.TB, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		var waiting int
		err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting == n
	}, 10*time.Second, 5*time.Millisecond, "%d transactions wait for the held lock", n)
}

// apply calls svc.Apply in the background; its outcome arrives on the channel.
func apply(svc *billing.Service, e billing.Event) <-chan outcome {
	ch := make(chan outcome, 1)
	go func() {
		applied, err := svc.Apply(context.Background(), e)
		ch <- outcome{id: e.ID, applied: applied, err: err}
	}()
	return ch
}

// lineUp starts a lone transaction for held (an org the test holds) on svc, waits
// until it waits for the lock, then starts one Apply per event in order, each
// only once the previous one waits in svc's queue, so the queue's order is
// events' order. It returns the leader's outcome and the others'.
func lineUp(t *testing.T, b *bundle, svc *billing.Service, held uuid.UUID, lockedBefore int, events []billing.Event) (<-chan outcome, []<-chan outcome) {
	t.Helper()
	leader := apply(svc, activated(held))
	b.waitLocked(t, lockedBefore+1)
	var rest []<-chan outcome
	for i, e := range events {
		rest = append(rest, apply(svc, e))
		require.Eventually(t, func() bool { return svc.Waiting() == i+1 }, 10*time.Second, time.Millisecond,
			"delivery %d waits for the next group while a transaction is in flight", i)
	}
	return leader, rest
}

func requireUnanswered(t *testing.T, chans []<-chan outcome) {
	t.Helper()
	for i, ch := range chans {
		select {
		case o := <-ch:
			t.Fatalf("delivery %d answered %+v before any commit", i, o)
		default:
		}
	}
}

func collect(t *testing.T, chans []<-chan outcome) []outcome {
	t.Helper()
	out := make([]outcome, len(chans))
	for i, ch := range chans {
		select {
		case out[i] = <-ch:
		case <-time.After(20 * time.Second):
			t.Fatalf("delivery %d never answered", i)
		}
	}
	return out
}

func TestGroupApply(t *testing.T) {
	t.Parallel()

	t.Run("deliveries that arrive during a transaction, HTTP and NATS alike, commit together in the next, each answered after it", func(t *testing.T) {
		t.Parallel()
		b := setup(t, freshDB(t, sqldb.Postgres))
		b.logTransactions(t)
		held, org := uuid.New(), uuid.New()
		release := b.hold(t, held)
		leader := apply(b.svc, activated(held))
		b.waitLocked(t, 1)

		const n = 8
		handle := b.handler(t, 0)
		evs := make([]event, n)
		answers := make([]<-chan int, n)
		for i := range evs {
			evs[i] = newEvent(billing.RuleActivated, org)
			ch := make(chan int, 1)
			answers[i] = ch
			go func() {
				if i%2 == 0 {
					ch <- b.deliver(t, evs[i].body()).Code
					return
				}
				err := handle(context.Background(), natsMsg(uint64(i), evs[i].ID, evs[i].body()))
				if err != nil {
					ch <- http.StatusInternalServerError
					return
				}
				ch <- http.StatusNoContent
			}()
		}
		require.Eventually(t, func() bool { return b.svc.Waiting() == n }, 10*time.Second, time.Millisecond, "all wait behind the transaction in flight")
		for i, ch := range answers {
			select {
			case c := <-ch:
				t.Fatalf("delivery %d answered %d before its commit", i, c)
			default:
			}
		}
		require.Zero(t, b.count(t, "billing_receipts"), "nothing committed while the leader waits")

		release()
		o := collect(t, []<-chan outcome{leader})[0]
		require.NoError(t, o.err)
		require.True(t, o.applied)
		for i, ch := range answers {
			select {
			case c := <-ch:
				require.Equal(t, http.StatusNoContent, c, "delivery %d", i)
			case <-time.After(20 * time.Second):
				t.Fatalf("delivery %d never answered", i)
			}
		}
		require.EqualValues(t, n, *b.activeRules(t, org))
		require.Equal(t, n+1, b.count(t, "billing_receipts"))
		group := b.txOf(t, uuid.MustParse(evs[0].ID))
		require.NotEqual(t, b.txOf(t, o.id), group, "the leader committed alone")
		for _, ev := range evs {
			require.Equal(t, group, b.txOf(t, uuid.MustParse(ev.ID)), "one transaction for the %d that waited", n)
		}
	})

	t.Run("a duplicate within a group and across groups is applied once, and only its first delivery reports applied", func(t *testing.T) {
		t.Parallel()
		b := setup(t, freshDB(t, sqldb.Postgres))
		held, org := uuid.New(), uuid.New()
		release := b.hold(t, held)
		first, again := activated(org), activated(org)
		// The leader applies first alone; the group holds it again (across
		// groups) and again twice (within the group).
		leader := apply(b.svc, first) // its org is not held: it commits at once
		o := collect(t, []<-chan outcome{leader})[0]
		require.NoError(t, o.err)
		require.True(t, o.applied)

		lead, rest := lineUp(t, b, b.svc, held, 0, []billing.Event{first, again, again, first})
		requireUnanswered(t, rest)
		release()
		require.NoError(t, collect(t, []<-chan outcome{lead})[0].err)
		got := collect(t, rest)
		for _, o := range got {
			require.NoError(t, o.err)
		}
		require.Equal(t, []bool{false, true, false, false}, []bool{got[0].applied, got[1].applied, got[2].applied, got[3].applied})
		require.EqualValues(t, 2, *b.activeRules(t, org), "first and again, once each")
		require.EqualValues(t, 1, *b.activeRules(t, held))
	})

	t.Run("a group writes receipts in event id order and quota rows in org order, whatever order its deliveries arrived in", func(t *testing.T) {
		t.Parallel()
		b := setup(t, freshDB(t, sqldb.Postgres))
		b.logTransactions(t)
		held := uuid.New()
		release := b.hold(t, held)
		orgs := make([]uuid.UUID, 8)
		for i := range orgs {
			orgs[i] = uuid.New()
		}
		slices.SortFunc(orgs, func(a, c uuid.UUID) int { return bytes.Compare(a[:], c[:]) })
		// UUIDv7 ids ascend as they are made; the deliveries arrive in the
		// opposite order, ids and orgs descending.
		evs := make([]billing.Event, len(orgs))
		for i, org := range orgs {
			evs[i] = activated(org)
		}
		arrival := slices.Clone(evs)
		slices.Reverse(arrival)
		lead, rest := lineUp(t, b, b.svc, held, 0, arrival)
		release()
		require.NoError(t, collect(t, []<-chan outcome{lead})[0].err)
		for _, o := range collect(t, rest) {
			require.NoError(t, o.err)
		}
		order := func(query string) []uuid.UUID {
			rows, err := b.pool.Query(context.Background(), query, b.txOf(t, evs[0].ID))
			require.NoError(t, err)
			var got []uuid.UUID
			for rows.Next() {
				var o uuid.UUID
				require.NoError(t, rows.Scan(&o))
				got = append(got, o)
			}
			require.NoError(t, rows.Err())
			return got
		}
		ids := make([]uuid.UUID, len(evs))
		for i, e := range evs {
			ids[i] = e.ID
		}
		require.Equal(t, ids, order(`SELECT event_id FROM receipt_log WHERE tx = $1 ORDER BY seq`), "ascending event id order")
		require.Equal(t, orgs, order(`SELECT org_id FROM quota_log WHERE tx = $1 ORDER BY seq`), "ascending org id order")
	})

	t.Run("two replicas whose groups touch the same orgs in opposite orders at once never deadlock", func(t *testing.T) {
		t.Parallel()
		b := setup(t, freshDB(t, sqldb.Postgres))
		b.logTransactions(t)
		other := setup(t, onPool(b.pool)).svc // a second replica on the same database
		held := uuid.New()
		release := b.hold(t, held)
		orgs := make([]uuid.UUID, 8)
		for i := range orgs {
			orgs[i] = uuid.New()
		}
		up, down := make([]billing.Event, len(orgs)), make([]billing.Event, len(orgs))
		for i := range orgs {
			up[i] = activated(orgs[i])
			down[i] = activated(orgs[len(orgs)-1-i])
		}
		leadA, restA := lineUp(t, b, b.svc, held, 0, up)
		leadB, restB := lineUp(t, b, other, held, 1, down)
		release()
		for _, o := range collect(t, append(append([]<-chan outcome{leadA, leadB}, restA...), restB...)) {
			require.NoError(t, o.err)
			require.True(t, o.applied)
		}
		for _, org := range orgs {
			require.EqualValues(t, 2, *b.activeRules(t, org))
		}
		require.NotEqual(t, b.txOf(t, up[0].ID), b.txOf(t, down[0].ID), "one group on each replica")
		var calls, committed int64
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT last_value FROM quota_calls`).Scan(&calls))
		require.NoError(t, b.pool.QueryRow(context.Background(), `SELECT count(*) FROM quota_log`).Scan(&committed))
		require.Equal(t, committed, calls, "no transaction was rolled back and retried (a deadlock would be)")
	})

	failing := []struct {
		name, code string
		want       fault.Code
		alone      bool
	}{
		{name: "a defect one member causes fails only that member; the others are applied alone", code: "P0001", want: fault.Internal, alone: true},
		{name: "an unavailable database fails every member, and each sender retries", code: "55P03", want: fault.Unavailable},
	}
	for _, tc := range failing {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, sqldb.Postgres))
			b.logTransactions(t)
			held, org := uuid.New(), uuid.New()
			release := b.hold(t, held)
			good1, bad, good2 := activated(org), activated(org), activated(org)
			_, err := b.pool.Exec(context.Background(), fmt.Sprintf(`
				CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					IF NEW.event_id = '%s' THEN RAISE EXCEPTION 'refused' USING ERRCODE = '%s'; END IF;
					RETURN NEW;
				END $$;
				CREATE TRIGGER refuse BEFORE INSERT ON billing_receipts FOR EACH ROW EXECUTE FUNCTION refuse();`, bad.ID, tc.code))
			require.NoError(t, err)
			lead, rest := lineUp(t, b, b.svc, held, 0, []billing.Event{good1, bad, good2})
			release()
			require.NoError(t, collect(t, []<-chan outcome{lead})[0].err)
			got := collect(t, rest)
			require.Equal(t, tc.want, fault.CodeOf(got[1].err), "the bad member: %v", got[1].err)
			require.False(t, b.hasReceipt(t, bad.ID.String()))
			if !tc.alone {
				for _, o := range got {
					require.Equal(t, tc.want, fault.CodeOf(o.err))
				}
				require.Nil(t, b.activeRules(t, org))
				return
			}
			for _, o := range []outcome{got[0], got[2]} {
				require.NoError(t, o.err)
				require.True(t, o.applied)
			}
			require.EqualValues(t, 2, *b.activeRules(t, org))
			require.NotEqual(t, b.txOf(t, good1.ID), b.txOf(t, good2.ID), "each applied in a transaction of its own")
		})
	}

	t.Run("a transaction that panics (a defect) hands the lead on: the next delivery is not left waiting", func(t *testing.T) {
		t.Parallel()
		svc := billing.NewService(postgres.NewDB(nil), slog.New(slog.NewTextHandler(io.Discard, nil))) // no pool: the statement panics
		for i := range 2 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			require.Panics(t, func() { _, _ = svc.Apply(ctx, activated(uuid.New())) }, "delivery %d reaches the database", i)
			cancel()
		}
		require.Zero(t, svc.Waiting())
	})

	t.Run("with group apply off every delivery runs its own transaction and none waits for another", func(t *testing.T) {
		t.Parallel()
		b := setup(t, onPool(setup(t, freshDB(t, sqldb.Postgres)).pool), billing.ApplyGroupMax(1))
		b.logTransactions(t)
		held := uuid.New()
		release := b.hold(t, held)
		leader := apply(b.svc, activated(held))
		b.waitLocked(t, 1)
		var rest []<-chan outcome
		for range 4 {
			rest = append(rest, apply(b.svc, activated(uuid.New())))
		}
		// They finish while the first still waits for the lock: nothing queues.
		got := collect(t, rest)
		require.Zero(t, b.svc.Waiting())
		txs := map[int64]bool{}
		for _, o := range got {
			require.NoError(t, o.err)
			require.True(t, o.applied)
			txs[b.txOf(t, o.id)] = true
		}
		require.Len(t, txs, len(got), "one transaction per event")
		release()
		require.NoError(t, collect(t, []<-chan outcome{leader})[0].err)
	})
}

// TestSQLiteReplicasApplyOnce: two billing replicas on one SQLite file, each
// grouping its concurrent deliveries, apply events of the same orgs at once:
// SQLite's one writer runs their groups one after another (no deadlock to
// avoid), every event is applied exactly once, and a redelivery to either
// replica changes nothing.
func TestSQLiteReplicasApplyOnce(t *testing.T) {
	t.Parallel()
	first := dbtest.New(t, sqldb.SQLite, migrations.Billing)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var svcs []*billing.Service
	for range 2 {
		db, err := sqlite.Open(t.Context(), first.URL, sqldb.Bounds{LockTimeout: 10 * time.Second, StatementTimeout: 10 * time.Second})
		require.NoError(t, err)
		t.Cleanup(func() { db.Close() })
		svcs = append(svcs, billing.NewService(db, logger))
	}
	orgs := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	const perOrg = 40
	var events []billing.Event
	for _, org := range orgs {
		for range perOrg {
			events = append(events, activated(org))
		}
	}
	var outcomes []<-chan outcome
	for i, e := range events {
		outcomes = append(outcomes, apply(svcs[i%2], e))
		outcomes = append(outcomes, apply(svcs[(i+1)%2], e)) // the same event at the other replica
	}
	applied := map[uuid.UUID]int{}
	for _, ch := range outcomes {
		o := <-ch
		require.NoError(t, o.err)
		if o.applied {
			applied[o.id]++
		}
	}
	require.Len(t, applied, len(events), "every event applied")
	for id, n := range applied {
		require.Equal(t, 1, n, "event %s applied %d times", id, n)
	}
	for _, org := range orgs {
		q, err := svcs[0].Quota(t.Context(), org)
		require.NoError(t, err)
		require.EqualValues(t, perOrg, q.ActiveRules)
	}
	again, err := svcs[1].Apply(t.Context(), events[0])
	require.NoError(t, err)
	require.False(t, again, "a redelivery changes nothing")
	require.Equal(t, len(events), first.Count(t, `SELECT count(*) FROM billing_receipts`))
}

// TestSQLiteNATSFailedPayloadIsABlob: billing_nats_failed.payload is a BLOB on
// SQLite and reads back byte for byte.
func TestSQLiteNATSFailedPayloadIsABlob(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, sqldb.SQLite, migrations.Billing)
	store := inbox.NewStore(db.DB, billing.ReceiptsTable, billing.NATSFailedTable)
	svc := billing.NewService(db.DB, slog.New(slog.NewTextHandler(io.Discard, nil)))
	payload := []byte{0x00, 0xff, '{', '}'}
	require.NoError(t, svc.InTx(t.Context(), func(tx billing.Tx) error {
		return tx.InsertNATSFailed(t.Context(), inbox.NATSFailed{StreamSeq: 7, StoredAt: 1, Subject: "s", MsgID: "m", Payload: payload, Reason: "r", Deliveries: 1, FailedAt: 2})
	}))
	var kind string
	require.NoError(t, db.QueryRow(`SELECT typeof(payload) FROM billing_nats_failed`).Scan(&kind))
	require.Equal(t, "blob", kind)
	rows, err := store.ListNATSFailed(t.Context())
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, payload, rows[0].Payload)
}

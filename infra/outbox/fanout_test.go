package outbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// fanEvent is a tag of the fan-out tests' own, so that their metrics are
// theirs whatever else runs in the process.
type fanEvent struct{ N int }

func (fanEvent) EventTag() string { return "FanThing" }

// otherEvent is a tag no route but the default subscriber takes.
type otherEvent struct{ N int }

func (otherEvent) EventTag() string { return "FanOther" }

var ledgerRoute = outbox.Route{Subscriber: "ledger", Tags: []string{"FanThing"}}

// appendRouted appends events in one committed transaction through a store of
// db's dialect built WithRoutes(routes...).
func appendRouted(t testing.TB, db *dbtest.DB, routes []outbox.Route, events ...outbox.Event) []uuid.UUID {
	t.Helper()
	on := outbox.WithRoutes(routes...)
	var ids []uuid.UUID
	fn := func(app appendFunc) error {
		for _, e := range events {
			id, err := app(e)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	}
	ctx := context.Background()
	err := database.Pick(db.DB, database.Dialects[error]{
		Postgres: func(db *postgres.DB) error { return appendIn(ctx, db, outbox.NewPostgresStore(db.Pool, on), fn) },
		SQLite:   func(db *sqlite.DB) error { return appendIn(ctx, db, outbox.NewSQLiteStore(db, on), fn) },
	})
	require.NoError(t, err)
	return ids
}

// delivery is one row of outbox_events as fan-out sees it.
type delivery struct {
	ID         uuid.UUID
	Subscriber string
	EventID    *uuid.UUID
}

func deliveries(t testing.TB, db *dbtest.DB) []delivery {
	t.Helper()
	rows := db.Query(t, `SELECT id, subscriber, event_id FROM outbox_events ORDER BY subscriber, created_at, id`)
	var out []delivery
	for rows.Next() {
		var d delivery
		require.NoError(t, rows.Scan(&d.ID, &d.Subscriber, &d.EventID))
		out = append(out, d)
	}
	require.NoError(t, rows.Err())
	return out
}

func TestAppendFansOut(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("an event of a routed tag gets the default row with its id and one row per route with event_id", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			routes := []outbox.Route{ledgerRoute, {Subscriber: "search", Tags: []string{"FanThing", "FanOther"}}}
			ids := appendRouted(t, db, routes, fanEvent{N: 1})
			got := deliveries(t, db)
			require.Len(t, got, 3)
			require.Equal(t, delivery{ID: ids[0], Subscriber: ""}, got[0], "billing's row: the event's id, no event_id")
			for i, name := range []string{"ledger", "search"} {
				r := got[i+1]
				require.Equal(t, name, r.Subscriber)
				require.NotEqual(t, ids[0], r.ID, "a row of its own")
				require.Equal(t, uuid.Version(7), r.ID.Version())
				require.NotNil(t, r.EventID)
				require.Equal(t, ids[0], *r.EventID)
			}
			require.Equal(t, 3, count(t, db, `event_tag = 'FanThing' AND payload IS NOT NULL AND processed_at IS NULL AND attempts = 0`))
		})

		t.Run("a tag no route lists gets the default row alone", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			ids := appendRouted(t, db, []outbox.Route{ledgerRoute}, otherEvent{N: 1})
			require.Equal(t, []delivery{{ID: ids[0]}}, deliveries(t, db))
		})

		t.Run("without routes every event is one row, as before fan-out", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			ids := appendRouted(t, db, nil, fanEvent{N: 1}, fanEvent{N: 2})
			require.Equal(t, []delivery{{ID: ids[0]}, {ID: ids[1]}}, deliveries(t, db))
		})
	})

	t.Run("routes that repeat a subscriber, name the default one or list no tag are refused at construction", func(t *testing.T) {
		t.Parallel()
		for _, routes := range [][]outbox.Route{
			{ledgerRoute, ledgerRoute},
			{{Subscriber: "", Tags: []string{"FanThing"}}},
			{{Subscriber: "ledger"}},
			{{Subscriber: "Ledger", Tags: []string{"FanThing"}}},
		} {
			require.Panics(t, func() { outbox.NewPostgresStore(nil, outbox.WithRoutes(routes...)) }, "%v", routes)
		}
	})
}

// recorder records the ids a subscriber was sent.
type recorder struct {
	mu  sync.Mutex
	ids []uuid.UUID
}

func (r *recorder) handle(ctx context.Context, m outbox.Message) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, m.ID)
	return nil
}

func (r *recorder) got() []uuid.UUID {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]uuid.UUID(nil), r.ids...)
}

func newLanes(t testing.TB, db *dbtest.DB, cfg outbox.Config, subs []outbox.Subscriber, lanes ...outbox.Lane) *outbox.Lanes {
	t.Helper()
	l, err := outbox.NewLanes(storeOf(t, db), cfg, subs, lanes, testLogger(t))
	require.NoError(t, err)
	require.NoError(t, l.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, l.Stop(ctx))
	})
	return l
}

func fanSub(fn outbox.Handler) []outbox.Subscriber {
	return []outbox.Subscriber{{Tag: "FanThing", Handle: fn}}
}

// labelled is the value of the counter name{tag, subscriber}.
func labelled(t *testing.T, name, tag, subscriber string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["tag"] == tag && labels["subscriber"] == subscriber {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestLanes(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("every subscriber of a tag receives each event once, with the event's id", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			var billing, ledger recorder
			l := newLanes(t, db, testConfig(), fanSub(billing.handle), outbox.Lane{Subscriber: "ledger", Subscribers: fanSub(ledger.handle)})
			ids := appendRouted(t, db, []outbox.Route{ledgerRoute}, fanEvent{N: 1}, fanEvent{N: 2}, fanEvent{N: 3})
			l.Nudge()
			require.Eventually(t, func() bool { return count(t, db, "processed_at IS NOT NULL") == 6 }, 10*time.Second, 10*time.Millisecond)
			require.ElementsMatch(t, ids, billing.got())
			require.ElementsMatch(t, ids, ledger.got(), "the same ids: every subscriber dedups on the event's")
		})

		t.Run("a subscriber that is down delays only itself: the other is delivered every event", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			var billing recorder
			down := func(context.Context, outbox.Message) error { return errors.New("connection refused") }
			l := newLanes(t, db, testConfig(), fanSub(billing.handle), outbox.Lane{Subscriber: "ledger", Subscribers: fanSub(down)})
			ids := appendRouted(t, db, []outbox.Route{ledgerRoute}, fanEvent{N: 1}, fanEvent{N: 2}, fanEvent{N: 3})
			l.Nudge()
			require.Eventually(t, func() bool {
				return count(t, db, "subscriber = '' AND processed_at IS NOT NULL") == 3 &&
					count(t, db, "subscriber = 'ledger' AND attempts >= 1 AND available_at > created_at") == 3
			}, 10*time.Second, 10*time.Millisecond)
			require.ElementsMatch(t, ids, billing.got())
			require.Zero(t, count(t, db, "subscriber = 'ledger' AND (processed_at IS NOT NULL OR failed_at IS NOT NULL)"),
				"ledger's rows wait for their retry, billing's were not held back by them")
		})

		t.Run("the metrics name the subscriber; billing's keep an empty one", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			beforeLedger := labelled(t, "outbox_events_dead_lettered_total", "FanThing", "ledger")
			beforeBilling := labelled(t, "outbox_events_processed_total", "FanThing", "")
			beforeAppended := labelled(t, "outbox_events_appended_total", "FanThing", "ledger")
			refuse := func(context.Context, outbox.Message) error { return outbox.Permanent(errors.New("400")) }
			var billing recorder
			l := newLanes(t, db, testConfig(), fanSub(billing.handle), outbox.Lane{Subscriber: "ledger", Subscribers: fanSub(refuse)})
			appendRouted(t, db, []outbox.Route{ledgerRoute}, fanEvent{N: 1})
			l.Nudge()
			require.Eventually(t, func() bool {
				return labelled(t, "outbox_events_dead_lettered_total", "FanThing", "ledger") >= beforeLedger+1 &&
					labelled(t, "outbox_events_processed_total", "FanThing", "") >= beforeBilling+1
			}, 10*time.Second, 10*time.Millisecond)
			require.GreaterOrEqual(t, labelled(t, "outbox_events_appended_total", "FanThing", "ledger"), beforeAppended+1)
		})

		t.Run("a requeue of a subscriber's failed row re-delivers to that subscriber alone", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			var billing, ledger recorder
			var refusing sync.Mutex
			refused := true
			flaky := func(ctx context.Context, m outbox.Message) error {
				refusing.Lock()
				defer refusing.Unlock()
				if refused {
					return outbox.Permanent(errors.New("400"))
				}
				return ledger.handle(ctx, m)
			}
			l := newLanes(t, db, testConfig(), fanSub(billing.handle), outbox.Lane{Subscriber: "ledger", Subscribers: fanSub(flaky)})
			ids := appendRouted(t, db, []outbox.Route{ledgerRoute}, fanEvent{N: 1})
			l.Nudge()
			store := storeOf(t, db)
			var failed []outbox.FailedRow
			require.Eventually(t, func() bool {
				var err error
				failed, err = outbox.Failed(context.Background(), store)
				require.NoError(t, err)
				return len(failed) == 1 && count(t, db, "subscriber = '' AND processed_at IS NOT NULL") == 1
			}, 10*time.Second, 10*time.Millisecond)
			require.Equal(t, "ledger", failed[0].Subscriber)

			refusing.Lock()
			refused = false
			refusing.Unlock()
			n, err := outbox.Requeue(context.Background(), store, []uuid.UUID{failed[0].ID})
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			l.Nudge()
			require.Eventually(t, func() bool { return count(t, db, "processed_at IS NOT NULL") == 2 }, 40*time.Second, 10*time.Millisecond)
			require.Equal(t, ids, ledger.got())
			require.Equal(t, ids, billing.got(), "billing, which succeeded, is not sent the event again")
		})
	})

	t.Run("a lane that repeats a subscriber or has an invalid name is refused", func(t *testing.T) {
		t.Parallel()
		db := newDBOn(t, sqldb.SQLite)
		for _, lanes := range [][]outbox.Lane{
			{{Subscriber: "ledger"}, {Subscriber: "ledger"}},
			{{Subscriber: "Ledger"}},
		} {
			_, err := outbox.NewLanes(storeOf(t, db), testConfig(), nil, lanes, testLogger(t))
			require.Error(t, err, "%v", lanes)
		}
	})
}

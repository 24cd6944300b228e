package outbox_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

// sharedDB is one database of dialect d holding both services' tables, as
// contract section 2 allows: labeling's outbox_events and billing's
// billing_outbox_events side by side.
func sharedDB(t *testing.T, d sqldb.Dialect) *dbtest.DB {
	t.Helper()
	db := newDBOn(t, d)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if d == sqldb.Postgres {
		require.NoError(t, postgres.Migrate(ctx, db.Pool, migrations.Billing, nil))
	} else {
		require.NoError(t, sqlite.Migrate(ctx, db.SQLite, migrations.Billing.SQLite, migrations.Billing.Table, nil))
	}
	return db
}

// counterValue is the value of the counter family name with tag in the
// default registry, 0 when it has none.
func counterValue(t *testing.T, name, tag string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tag" && l.GetValue() == tag {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// TestTwoTablesInOneDatabase: stores of two tables in one database never see
// each other's rows: a relay of billing's table claims, settles and counts
// only its own rows, under its own metric names; the backlog, the operator
// commands and retention of each store touch its table alone.
func TestTwoTablesInOneDatabase(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := sharedDB(t, d)
		labIDs := appendEvents(t, db, things(3)...)
		billIDs := appendEventsIn(t, db, billingOutbox, things(2)...)

		lab, bill := storeOf(t, db), storeOn(t, db, billingOutbox)
		require.Equal(t, outbox.DefaultTable, lab.Table())
		require.Equal(t, billingOutbox, bill.Table())

		// A tag of this test alone, so that parallel tests do not move the counters.
		tag := "TwoTables" + string(d)
		execIn(t, db, billingOutbox, `UPDATE outbox_events SET event_tag = $1`, tag)
		before := counterValue(t, "billing_outbox_events_processed_total", tag)
		var seen atomic.Int32
		r, err := outbox.NewRelay(bill, testConfig(), []outbox.Subscriber{{Tag: tag, Handle: func(context.Context, outbox.Message) error {
			seen.Add(1)
			return nil
		}}}, testLogger(t))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
		n, err := r.RunOnce(ctxT(t))
		require.NoError(t, err)
		require.Equal(t, 2, n, "billing's rows only")
		require.EqualValues(t, 2, seen.Load())
		require.Equal(t, 2, countIn(t, db, billingOutbox, "processed_at IS NOT NULL"))
		require.Equal(t, 3, count(t, db, "processed_at IS NULL AND attempts = 0"), "labeling's rows untouched")
		require.Equal(t, before+2, counterValue(t, "billing_outbox_events_processed_total", tag),
			"billing's relay counts under billing's names")
		require.Zero(t, counterValue(t, "outbox_events_processed_total", tag), "not under labeling's")

		oldest, _, err := bill.Backlog(ctxT(t))
		require.NoError(t, err)
		require.Nil(t, oldest, "billing's outbox is empty")
		oldest, _, err = lab.Backlog(ctxT(t))
		require.NoError(t, err)
		require.NotNil(t, oldest, "labeling's is not")

		exec(t, db, `UPDATE outbox_events SET failed_at = 1 WHERE id = $1`, labIDs[0])
		failed, err := outbox.Failed(ctxT(t), bill)
		require.NoError(t, err)
		require.Empty(t, failed, "labeling's dead letter is not billing's")
		n64, err := outbox.Requeue(ctxT(t), bill, labIDs)
		require.NoError(t, err)
		require.Zero(t, n64)
		_, err = outbox.Delete(ctxT(t), lab, billIDs)
		require.NoError(t, err)
		require.Equal(t, 2, countIn(t, db, billingOutbox, "true"), "labeling's delete names billing's ids in vain")

		policy := outbox.ProcessedRetention(bill, time.Millisecond)
		require.Equal(t, billingOutbox, policy.Name)
		deleted, err := policy.Delete(ctxT(t), time.Now().Add(time.Hour).UnixMilli(), 100)
		require.NoError(t, err)
		require.EqualValues(t, 2, deleted)
		require.Equal(t, 3, count(t, db, "true"), "retention of billing's table leaves labeling's")

		c := outbox.NewBacklogCollector(bill)
		reg := prometheus.NewPedanticRegistry()
		require.NoError(t, reg.Register(c))
		require.NoError(t, reg.Register(outbox.NewBacklogCollector(lab)), "both tables' gauges in one registry")
		families, err := reg.Gather()
		require.NoError(t, err)
		var names []string
		for _, f := range families {
			names = append(names, f.GetName())
		}
		require.ElementsMatch(t, []string{"billing_outbox_failed_rows", "billing_outbox_oldest_pending_age_seconds", "billing_outbox_pending_rows",
			"outbox_failed_rows", "outbox_oldest_pending_age_seconds", "outbox_pending_rows"}, names)
	})
}

// TestTableNotifyChannel: on PostgreSQL a store notifies on its table's own
// channel, so relays of one table are never woken by another's.
func TestTableNotifyChannel(t *testing.T) {
	t.Parallel()
	db := sharedDB(t, sqldb.Postgres)
	conn, err := pgx.Connect(ctxT(t), db.URL)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, ch := range []string{outbox.DefaultTable, billingOutbox} {
		_, err := conn.Exec(ctxT(t), "LISTEN "+ch)
		require.NoError(t, err)
	}
	for _, table := range []string{billingOutbox, outbox.DefaultTable} {
		id := appendEventsIn(t, db, table, thing{N: 1})[0]
		execIn(t, db, table, `UPDATE outbox_events SET failed_at = 1 WHERE id = $1`, id)
		n, err := outbox.RequeueAllFailed(ctxT(t), storeOn(t, db, table))
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		ctx, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
		note, err := conn.WaitForNotification(ctx)
		cancel()
		require.NoError(t, err)
		require.Equal(t, table, note.Channel, "the requeue of %s notifies its own channel", table)
	}
}

func TestWithTableRefusesWhatIsNoIdentifier(t *testing.T) {
	t.Parallel()
	db := newDBOn(t, sqldb.SQLite)
	for _, name := range []string{"", "Outbox", "outbox events", "outbox_events; DROP TABLE x", `"quoted"`, "1outbox",
		"a234567890123456789012345678901234567890123456789"} {
		require.Panics(t, func() { outbox.NewStore(db.DB, outbox.WithTable(name)) }, "%q", name)
	}
	require.Equal(t, "a23456789012345678901234567890123456789012345678",
		outbox.NewStore(db.DB, outbox.WithTable("a23456789012345678901234567890123456789012345678")).Table(), "48 characters")
}

// TestRetryAfter: a failure wrapped with RetryAfter delays the row by what it
// asks when that is longer than the backoff, never beyond RetryMax, and
// never shortens the backoff; Permanent still fails the row at once.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		for name, c := range map[string]struct {
			after     time.Duration
			permanent bool
			lo, hi    time.Duration
		}{
			"a longer wait is taken":           {after: 10 * time.Minute, lo: 10 * time.Minute, hi: 10 * time.Minute},
			"a wait past RetryMax is capped":   {after: 2 * time.Hour, lo: time.Hour, hi: time.Hour},
			"a shorter wait keeps the backoff": {after: time.Millisecond, lo: 500 * time.Millisecond, hi: time.Second},
			"a permanent error fails at once":  {after: time.Minute, permanent: true},
		} {
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				db := newDBOn(t, d)
				clk := newClock()
				cfg := testConfig()
				cfg.Now = clk.Now
				cfg.RetryBase, cfg.RetryMax = time.Second, time.Hour
				r := newRelay(t, db, cfg, handle(func(context.Context, outbox.Message) error {
					err := outbox.RetryAfter(errors.New("provider answered 503"), c.after)
					if c.permanent {
						err = outbox.Permanent(err)
					}
					return err
				}))
				id := appendEvents(t, db, thing{N: 1})[0]
				clk.Set(time.Now().UnixMilli())
				n, err := r.RunOnce(ctxT(t))
				require.NoError(t, err)
				require.Equal(t, 1, n)
				got := getRow(t, db, id)
				require.Contains(t, *got.LastError, "provider answered 503")
				if c.permanent {
					require.NotNil(t, got.FailedAt)
					return
				}
				require.Nil(t, got.FailedAt)
				delay := time.Duration(got.AvailableAt-clk.Ms()) * time.Millisecond
				require.GreaterOrEqual(t, delay, c.lo)
				require.LessOrEqual(t, delay, c.hi)
			})
		}
	})
}

func TestRetryAfterOf(t *testing.T) {
	t.Parallel()
	require.NoError(t, outbox.RetryAfter(nil, time.Second))
	base := errors.New("busy")
	err := outbox.RetryAfter(base, time.Minute)
	require.ErrorIs(t, err, base)
	require.Equal(t, "busy", err.Error())
	d, ok := outbox.RetryAfterOf(outbox.Permanent(err))
	require.True(t, ok, "found through other wrappers")
	require.Equal(t, time.Minute, d)
	_, ok = outbox.RetryAfterOf(base)
	require.False(t, ok)
}

package billing_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// nudges counts the Service's nudges of its relay.
type nudges struct{ n atomic.Int64 }

func (c *nudges) Nudge() { c.n.Add(1) }

// outboxRow is a billing_outbox_events row as a test reads it.
type outboxRow struct {
	ID                     uuid.UUID
	Tag                    string
	Payload                billing.QuotaChanged
	CreatedAt, AvailableAt int64
	Attempts               int
	Pending                bool
}

// outboxRows reads billing_outbox_events in id order.
func (b *bundle) outboxRows(t testing.TB) []outboxRow {
	t.Helper()
	rows := b.db.Query(t, `SELECT CAST(id AS text), event_tag, CAST(payload AS text), created_at, available_at, attempts,
		processed_at IS NULL AND failed_at IS NULL AND claimed_until IS NULL
		FROM billing_outbox_events ORDER BY id`)
	var out []outboxRow
	for rows.Next() {
		var r outboxRow
		var id, payload string
		require.NoError(t, rows.Scan(&id, &r.Tag, &payload, &r.CreatedAt, &r.AvailableAt, &r.Attempts, &r.Pending))
		r.ID = uuid.MustParse(id)
		dec := json.NewDecoder(strings.NewReader(payload))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(&r.Payload), payload)
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// requireRows checks the rows are exactly want's facts, in order, each as
// outbox.Append writes a row: a UUIDv7 id, tag QuotaChanged, pending,
// available at once, no attempt.
func requireRows(t *testing.T, rows []outboxRow, want []billing.QuotaChanged) {
	t.Helper()
	got := make([]billing.QuotaChanged, len(rows))
	for i, r := range rows {
		got[i] = r.Payload
		require.Equal(t, uuid.Version(7), r.ID.Version(), "row %d", i)
		require.Equal(t, "QuotaChanged", r.Tag)
		require.Equal(t, r.CreatedAt, r.AvailableAt)
		require.Positive(t, r.CreatedAt)
		require.Zero(t, r.Attempts)
		require.True(t, r.Pending)
	}
	require.Equal(t, want, got)
}

// quotaChanged is the fact of source, the org's version-th change, leaving it
// at n active rules.
func quotaChanged(org uuid.UUID, n, version int64, source billing.Event) billing.QuotaChanged {
	return billing.QuotaChanged{OrgID: org, ActiveRules: n, SourceEventID: source.ID, Version: version}
}

// version reads org's billing_quota.version.
func (b *bundle) version(t testing.TB, org uuid.UUID) int64 {
	t.Helper()
	var v int64
	require.NoError(t, b.db.QueryRow(`SELECT version FROM billing_quota WHERE org_id = $1`, org).Scan(&v))
	return v
}

func changeOf(org uuid.UUID, delta int64) billing.Event {
	return billing.Event{ID: uuid.Must(uuid.NewV7()), Type: billing.RuleActivated, OccurredAt: 1, Value: billing.Effect{OrgID: org, Delta: delta}}
}

// holdWrites makes the next apply wait: on PostgreSQL a lock on held's quota
// row (an apply for held waits), on SQLite the write lock (every apply waits).
func (b *bundle) holdWrites(t *testing.T, held uuid.UUID) (release func()) {
	t.Helper()
	if b.db.Dialect() == sqldb.Postgres {
		return b.hold(t, held)
	}
	locked, done, finished := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		finished <- b.db.SQLite.InTx(context.Background(), sqldb.TxOptions{}, func(tx sqlite.Tx) error {
			if _, err := tx.Exec(context.Background(), `UPDATE billing_quota SET updated_at = updated_at`); err != nil {
				return err
			}
			close(locked)
			<-done
			return nil
		})
	}()
	<-locked
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

// eachPath runs fn on each dialect on billing's default path, and on
// PostgreSQL on the simple path too (SimplePath: SQLite has only that one),
// so that both paths pass the same cases.
func eachPath(t *testing.T, fn func(t *testing.T, d sqldb.Dialect, path []billing.Option)) {
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		fn(t, d, nil)
		if d == sqldb.Postgres {
			t.Run("simple path", func(t *testing.T) {
				t.Parallel()
				fn(t, d, []billing.Option{billing.SimplePath()})
			})
		}
	})
}

func TestApplyAppendsQuotaChanged(t *testing.T) {
	t.Parallel()
	eachPath(t, func(t *testing.T, d sqldb.Dialect, path []billing.Option) {

		t.Run("one row per fresh event with the org's count and version right after it, none for a duplicate, a nudge per commit that appended", func(t *testing.T) {
			t.Parallel()
			n := &nudges{}
			b := setup(t, freshDB(t, d), append(path, billing.NudgeOnAppend(n))...)
			a, c := uuid.New(), uuid.New()
			evs := []billing.Event{changeOf(a, 1), changeOf(a, 1), changeOf(c, 1), changeOf(a, -1), changeOf(c, 0), changeOf(c, -1)}
			for _, e := range evs {
				applied, err := b.svc.Apply(t.Context(), e)
				require.NoError(t, err)
				require.True(t, applied)
			}
			want := []billing.QuotaChanged{quotaChanged(a, 1, 1, evs[0]), quotaChanged(a, 2, 2, evs[1]), quotaChanged(c, 1, 1, evs[2]),
				quotaChanged(a, 1, 3, evs[3]), quotaChanged(c, 0, 2, evs[5])}
			requireRows(t, b.outboxRows(t), want)
			require.EqualValues(t, 5, n.n.Load(), "a nudge after each commit that appended; none for a delta of 0")
			require.EqualValues(t, 3, b.version(t, a))
			require.EqualValues(t, 2, b.version(t, c), "a delta of 0 is no change: no version")

			for _, e := range evs[:2] {
				applied, err := b.svc.Apply(t.Context(), e)
				require.NoError(t, err)
				require.False(t, applied)
			}
			requireRows(t, b.outboxRows(t), want)
			require.EqualValues(t, 5, n.n.Load(), "a duplicate appends nothing and wakes nobody")
			require.EqualValues(t, 3, b.version(t, a), "a duplicate advances no version")
		})

		t.Run("a group appends one row per event, two events of one org each with its own count", func(t *testing.T) {
			t.Parallel()
			n := &nudges{}
			b := setup(t, freshDB(t, d), append(path, billing.NudgeOnAppend(n))...)
			if d == sqldb.Postgres {
				b.logTransactions(t)
			}
			held, x, y := uuid.New(), uuid.New(), uuid.New()
			before := changeOf(x, 1)
			_, err := b.svc.Apply(t.Context(), before)
			require.NoError(t, err)

			release := b.holdWrites(t, held)
			// One apply in flight (waiting for the hold), one queued: on
			// SQLite either may be the one in flight.
			first := []<-chan outcome{apply(b.svc, changeOf(held, 1))}
			if d == sqldb.Postgres {
				b.waitLocked(t, 1)
			} else {
				first = append(first, apply(b.svc, changeOf(held, 1)))
				require.Eventually(t, func() bool { return b.svc.Waiting() == 1 }, 10*time.Second, time.Millisecond)
			}
			queued := b.svc.Waiting()
			group := []billing.Event{changeOf(x, 1), changeOf(x, 1), changeOf(y, 1), changeOf(x, -1)}
			var rest []<-chan outcome
			for i, e := range group {
				rest = append(rest, apply(b.svc, e))
				require.Eventually(t, func() bool { return b.svc.Waiting() == queued+i+1 }, 10*time.Second, time.Millisecond,
					"event %d waits for the next group", i)
			}
			release()
			for _, o := range collect(t, append(first, rest...)) {
				require.NoError(t, o.err)
				require.True(t, o.applied)
			}
			if d == sqldb.Postgres {
				for _, e := range group[1:] {
					require.Equal(t, b.txOf(t, group[0].ID), b.txOf(t, e.ID), "the four events committed in one group")
				}
			}
			require.EqualValues(t, 2, *b.activeRules(t, x))
			var ofGroup []billing.QuotaChanged
			for _, r := range b.outboxRows(t) {
				if r.Payload.OrgID != held {
					ofGroup = append(ofGroup, r.Payload)
				}
			}
			require.Equal(t, []billing.QuotaChanged{
				quotaChanged(x, 1, 1, before),
				quotaChanged(x, 2, 2, group[0]), quotaChanged(x, 3, 3, group[1]), quotaChanged(y, 1, 1, group[2]), quotaChanged(x, 2, 4, group[3]),
			}, ofGroup, "in event id order: the count (version) after the group less the deltas (changes) of the org's later events")
		})

		t.Run("a rolled-back apply appends nothing and wakes nobody", func(t *testing.T) {
			t.Parallel()
			n := &nudges{}
			b := setup(t, freshDB(t, d), append(path, billing.NudgeOnAppend(n))...)
			if d == sqldb.Postgres {
				// At COMMIT, after the receipt, the quota and the outbox row are written.
				b.failAtCommit(t, "P0001", -1)
			} else {
				// After the outbox row is inserted.
				b.db.Exec(t, `CREATE TRIGGER fail_append AFTER INSERT ON billing_outbox_events
					BEGIN SELECT RAISE(ABORT, 'injected'); END`)
			}
			org := uuid.New()
			_, err := b.svc.Apply(t.Context(), changeOf(org, 1))
			require.Error(t, err)
			require.Zero(t, b.count(t, "billing_outbox_events"))
			require.Zero(t, b.count(t, "billing_receipts"))
			require.Nil(t, b.activeRules(t, org))
			require.Zero(t, n.n.Load())
		})
	})

	t.Run("a serialization failure retried in-process appends one row", func(t *testing.T) {
		t.Parallel()
		b := setup(t, freshDB(t, sqldb.Postgres))
		calls := b.failAtCommit(t, "40001", 2)
		org := uuid.New()
		e := changeOf(org, 1)
		_, err := b.svc.Apply(t.Context(), e)
		require.NoError(t, err)
		require.EqualValues(t, 3, calls())
		requireRows(t, b.outboxRows(t), []billing.QuotaChanged{quotaChanged(org, 1, 1, e)})
		require.EqualValues(t, 1, b.version(t, org), "the retries advanced the version once")
	})
}

// TestWithoutProvider: a billing that calls no provider (PROVIDER_URL unset)
// appends no QuotaChanged row, so its outbox cannot grow without bound, but
// still counts each change in the org's version, so that the rows of a
// provider configured later continue the org's order.
func TestWithoutProvider(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := freshDB(t, d)
		n := &nudges{}
		b := setup(t, db, billing.WithoutQuotaChanged(), billing.NudgeOnAppend(n))
		org := uuid.New()
		for _, e := range []billing.Event{changeOf(org, 1), changeOf(org, 1), changeOf(org, -1), changeOf(org, 0)} {
			applied, err := b.svc.Apply(t.Context(), e)
			require.NoError(t, err)
			require.True(t, applied)
		}
		require.EqualValues(t, 1, *b.activeRules(t, org))
		require.Zero(t, b.count(t, "billing_outbox_events"), "no row appended without a provider")
		require.Zero(t, n.n.Load(), "nothing appended, nobody woken")
		require.EqualValues(t, 3, b.version(t, org), "the version advanced with each change all the same")

		later := setup(t, db)
		e := changeOf(org, 1)
		_, err := later.svc.Apply(t.Context(), e)
		require.NoError(t, err)
		requireRows(t, later.outboxRows(t), []billing.QuotaChanged{quotaChanged(org, 2, 4, e)})
	})
}

// TestQuotaChangedCounted: billing_outbox_events_appended_total{tag="QuotaChanged"}
// counts the committed rows, and only them. Not parallel, nor are its
// dialects (dbtest.Each's subtests would run side by side): it reads a
// process-wide counter.
func TestQuotaChangedCounted(t *testing.T) {
	for _, d := range dbtest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			quotaChangedCounted(t, d)
		})
	}
}

func quotaChangedCounted(t *testing.T, d sqldb.Dialect) {
	b := setup(t, freshDB(t, d))
	e := changeOf(uuid.New(), 1)
	before := appendedTotal(t)
	for range 2 {
		_, err := b.svc.Apply(t.Context(), e)
		require.NoError(t, err)
	}
	_, err := b.svc.Apply(t.Context(), changeOf(uuid.New(), 0))
	require.NoError(t, err)
	require.Equal(t, before+1, appendedTotal(t))
}

// appendedTotal reads billing_outbox_events_appended_total{tag="QuotaChanged"}.
func appendedTotal(t *testing.T) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "billing_outbox_events_appended_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "tag" && l.GetValue() == "QuotaChanged" {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

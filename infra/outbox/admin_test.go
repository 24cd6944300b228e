package outbox_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// adminRows is one row in each state.
type adminRows struct {
	pool                       *dbtest.DB
	failed, processed, pending uuid.UUID
}

func setupAdmin(t *testing.T, d sqldb.Dialect) adminRows {
	t.Helper()
	db := newDBOn(t, d)
	ids := appendEvents(t, db, things(3)...)
	exec(t, db, `UPDATE outbox_events SET attempts = 5, failed_at = 1000, last_error = 'gave up', claimed_until = NULL WHERE id = $1`, ids[0])
	exec(t, db, `UPDATE outbox_events SET attempts = 1, processed_at = 2000 WHERE id = $1`, ids[1])
	exec(t, db, `UPDATE outbox_events SET attempts = 2, available_at = available_at + 60000, last_error = 'retry' WHERE id = $1`, ids[2])
	return adminRows{pool: db, failed: ids[0], processed: ids[1], pending: ids[2]}
}

func TestFailed(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("lists only failed rows, oldest failure first", func(t *testing.T) {
			t.Parallel()
			a := setupAdmin(t, d)
			later := appendEvents(t, a.pool, thing{N: 9})[0]
			exec(t, a.pool, `UPDATE outbox_events SET attempts = 1, failed_at = 500, last_error = 'bad payload' WHERE id = $1`, later)

			got, err := outbox.Failed(ctxT(t), storeOf(t, a.pool))
			require.NoError(t, err)
			require.Equal(t, []outbox.FailedRow{
				{ID: later, Tag: "Thing", Attempts: 1, FailedAt: 500, LastError: "bad payload"},
				{ID: a.failed, Tag: "Thing", Attempts: 5, FailedAt: 1000, LastError: "gave up"},
			}, got)
		})

		t.Run("an empty dead letter is an empty list", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			got, err := outbox.Failed(ctxT(t), storeOf(t, db))
			require.NoError(t, err)
			require.Empty(t, got)
		})
	})
}

func TestRequeue(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("makes failed rows pending again and leaves the others alone", func(t *testing.T) {
			t.Parallel()
			a := setupAdmin(t, d)
			processed, pending := getRow(t, a.pool, a.processed), getRow(t, a.pool, a.pending)
			// A row dead-lettered by an old relay may still carry its claim's token.
			exec(t, a.pool, `UPDATE outbox_events SET claim_token = $2 WHERE id = $1`, a.failed, uuid.New())
			before := time.Now().UnixMilli()

			n, err := outbox.Requeue(ctxT(t), storeOf(t, a.pool), []uuid.UUID{a.failed, a.processed, a.pending, uuid.New()})
			require.NoError(t, err)
			require.EqualValues(t, 1, n)

			got := getRow(t, a.pool, a.failed)
			require.Nil(t, got.FailedAt)
			require.Zero(t, got.Attempts)
			require.Nil(t, got.ClaimedUntil)
			require.Zero(t, count(t, a.pool, "id = $1 AND claim_token IS NOT NULL", a.failed), "no earlier claim can settle it")
			require.GreaterOrEqual(t, got.AvailableAt, before)
			require.LessOrEqual(t, got.AvailableAt, time.Now().UnixMilli())
			require.Equal(t, processed, getRow(t, a.pool, a.processed), "a processed row is never delivered again")
			require.Equal(t, pending, getRow(t, a.pool, a.pending))

			r := newRelay(t, a.pool, testConfig(), handle(ok))
			claimed, err := r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, 1, claimed, "the requeued row is claimable at once")
			require.NotNil(t, getRow(t, a.pool, a.failed).ProcessedAt)
		})

		t.Run("all failed rows", func(t *testing.T) {
			t.Parallel()
			a := setupAdmin(t, d)
			other := appendEvents(t, a.pool, thing{N: 9})[0]
			exec(t, a.pool, `UPDATE outbox_events SET attempts = 1, failed_at = 500, claim_token = $2 WHERE id = $1`, other, uuid.New())

			n, err := outbox.RequeueAllFailed(ctxT(t), storeOf(t, a.pool))
			require.NoError(t, err)
			require.EqualValues(t, 2, n)
			require.Zero(t, count(t, a.pool, "failed_at IS NOT NULL"))
			require.Equal(t, 2, count(t, a.pool, "attempts = 0"))
			require.Zero(t, count(t, a.pool, "claim_token IS NOT NULL"))
			require.NotNil(t, getRow(t, a.pool, a.processed).ProcessedAt)

			n, err = outbox.RequeueAllFailed(ctxT(t), storeOf(t, a.pool))
			require.NoError(t, err)
			require.Zero(t, n)
		})
	})
}

func TestDelete(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("deletes failed and processed rows", func(t *testing.T) {
			t.Parallel()
			a := setupAdmin(t, d)
			n, err := outbox.Delete(ctxT(t), storeOf(t, a.pool), []uuid.UUID{a.failed, a.processed, uuid.New()})
			require.NoError(t, err)
			require.EqualValues(t, 2, n)
			rows := allRows(t, a.pool)
			require.Len(t, rows, 1)
			require.Equal(t, a.pending, rows[0].ID)
		})

		t.Run("refuses a pending row and deletes nothing", func(t *testing.T) {
			t.Parallel()
			a := setupAdmin(t, d)
			n, err := outbox.Delete(ctxT(t), storeOf(t, a.pool), []uuid.UUID{a.failed, a.pending, a.processed})
			require.ErrorIs(t, err, outbox.ErrPending)
			require.ErrorContains(t, err, a.pending.String())
			require.NotContains(t, err.Error(), a.failed.String())
			require.Zero(t, n)
			require.Len(t, allRows(t, a.pool), 3)
		})
	})
}

func TestRequeueReachesRunningRelays(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	clk := newClock()
	clk.Add(time.Second) // ahead of the appends, which use the real clock
	cfg := testConfig()
	// The poll and the sweep (30s) are far off: only the requeue itself can
	// bring a running relay to the row in time.
	cfg.PollInterval, cfg.Notify, cfg.Now = 10*time.Second, true, clk.Now
	var seen sync.Map
	r := newRelay(t, pg(db.Pool), cfg, handle(func(_ context.Context, m outbox.Message) error {
		if _, again := seen.LoadOrStore(m.ID, true); !again {
			return outbox.Permanent(errors.New("refused the first time"))
		}
		return nil
	}))
	require.NoError(t, r.Start(ctxT(t)))
	failed := appendEvents(t, pg(db.Pool), thing{N: 1})[0]
	r.Nudge()
	require.Eventually(t, func() bool { return getRow(t, pg(db.Pool), failed).FailedAt != nil },
		10*time.Second, 10*time.Millisecond)

	// A later claim lifts the relay's scan floor above the failed row.
	clk.Add(10 * time.Second)
	later := appendEvents(t, pg(db.Pool), thing{N: 2})[0]
	r.Nudge()
	require.Eventually(t, func() bool { return getRow(t, pg(db.Pool), later).FailedAt != nil },
		20*time.Second, 10*time.Millisecond)

	n, err := outbox.Requeue(ctxT(t), outbox.NewPostgresStore(db.Pool), []uuid.UUID{failed})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Eventually(t, func() bool { return getRow(t, pg(db.Pool), failed).ProcessedAt != nil },
		8*time.Second, 10*time.Millisecond, "a running relay delivers a requeued row at once, not at its sweep (30s away; its polls skip the row below their floor)")

	n, err = outbox.RequeueAllFailed(ctxT(t), outbox.NewPostgresStore(db.Pool))
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
	require.Eventually(t, func() bool { return getRow(t, pg(db.Pool), later).ProcessedAt != nil },
		8*time.Second, 10*time.Millisecond, "so does one requeued with --all-failed")
}

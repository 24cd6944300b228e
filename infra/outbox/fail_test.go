package outbox_test

import (
	"context"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

func TestFail(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("dead-letters the pending rows now and leaves the others alone", func(t *testing.T) {
			t.Parallel()
			a := setupAdmin(t, d)
			failed, processed := getRow(t, a.pool, a.failed), getRow(t, a.pool, a.processed)
			exec(t, a.pool, `UPDATE outbox_events SET claimed_until = 1, claim_token = $2, claim_lease = 60000 WHERE id = $1`, a.pending, uuid.New())

			n, err := outbox.Fail(ctxT(t), storeOf(t, a.pool), []uuid.UUID{a.failed, a.processed, a.pending, uuid.New()})
			require.NoError(t, err)
			require.EqualValues(t, 1, n)

			got := getRow(t, a.pool, a.pending)
			require.NotNil(t, got.FailedAt)
			require.Nil(t, got.ProcessedAt)
			require.Nil(t, got.ClaimedUntil)
			require.Equal(t, 2, got.Attempts, "the attempts stay as they were")
			require.NotNil(t, got.LastError)
			require.Equal(t, outbox.FailedByOperator+" after 2 attempt(s); last error: retry", *got.LastError)
			require.Zero(t, count(t, a.pool, "id = $1 AND (claim_token IS NOT NULL OR claim_lease IS NOT NULL)", a.pending))
			require.Equal(t, failed, getRow(t, a.pool, a.failed), "a failed row keeps its failure")
			require.Equal(t, processed, getRow(t, a.pool, a.processed), "a processed row stays processed")

			rows, err := outbox.Failed(ctxT(t), storeOf(t, a.pool))
			require.NoError(t, err)
			require.Len(t, rows, 2, "listed with the dead letters")
		})

		t.Run("a relay that holds the row cannot settle it afterwards", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			id := appendEvents(t, db, thing{N: 1})[0]
			entered, result := make(chan struct{}), make(chan error)
			r := newRelay(t, db, testConfig(), handle(func(context.Context, outbox.Message) error {
				close(entered)
				return <-result
			}))
			done := runBlocked(t, r, context.Background(), entered)
			require.NotNil(t, getRow(t, db, id).ClaimedUntil, "the relay holds the row")

			n, err := outbox.Fail(ctxT(t), storeOf(t, db), []uuid.UUID{id})
			require.NoError(t, err)
			require.EqualValues(t, 1, n)

			// Its delivery succeeds after the fail: the settle is fenced.
			result <- nil
			require.NoError(t, <-done)
			got := getRow(t, db, id)
			require.Nil(t, got.ProcessedAt, "the held claim's settle changed nothing")
			require.NotNil(t, got.FailedAt, "the row stays failed")
			require.True(t, strings.HasPrefix(*got.LastError, outbox.FailedByOperator), *got.LastError)

			claimed, err := r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Zero(t, claimed, "a failed row is never claimed")
		})

		t.Run("a row failed now is requeued like any failed row", func(t *testing.T) {
			t.Parallel()
			a := setupAdmin(t, d)
			_, err := outbox.Fail(ctxT(t), storeOf(t, a.pool), []uuid.UUID{a.pending})
			require.NoError(t, err)

			n, err := outbox.Requeue(ctxT(t), storeOf(t, a.pool), []uuid.UUID{a.pending})
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			r := newRelay(t, a.pool, testConfig(), handle(ok))
			claimed, err := r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, 1, claimed)
			require.NotNil(t, getRow(t, a.pool, a.pending).ProcessedAt)
		})

		t.Run("on billing's table too", func(t *testing.T) {
			t.Parallel()
			db := newBillingDBOn(t, d)
			id := appendEventsIn(t, db, billingOutbox, thing{N: 1})[0]
			n, err := outbox.Fail(ctxT(t), storeOn(t, db, billingOutbox), []uuid.UUID{id})
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			require.NotNil(t, getRowIn(t, db, billingOutbox, id).FailedAt)
		})
	})
}

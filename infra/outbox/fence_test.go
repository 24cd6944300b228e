package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// runBlocked runs one RunOnce of r in the background and waits until its handler
// holds the row. It returns a channel of RunOnce's outcome.
func runBlocked(t *testing.T, r *outbox.Relay, ctx context.Context, entered <-chan struct{}) <-chan error {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		_, err := r.RunOnce(ctx)
		done <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the handler never got the row")
	}
	return done
}

func TestRelayFenceSurvivesRequeue(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)
		id := appendEvents(t, db, thing{N: 1})[0]
		expire := func() {
			exec(t, db, `UPDATE outbox_events SET claimed_until = $2 WHERE id = $1`, id, time.Now().Add(-time.Second).UnixMilli())
		}

		// A claims the row (attempt 1) and stalls past its lease.
		aEntered, aResult := make(chan struct{}), make(chan error)
		a := newRelay(t, db, testConfig(), handle(func(context.Context, outbox.Message) error {
			close(aEntered)
			return <-aResult
		}))
		aDone := runBlocked(t, a, context.Background(), aEntered)
		expire()

		// B reclaims it (attempt 2) and dead-letters it; an operator requeues it,
		// which resets attempts to 0.
		b := newRelay(t, db, testConfig(), handle(func(context.Context, outbox.Message) error {
			return outbox.Permanent(errors.New("billing answered 400"))
		}))
		n, err := b.RunOnce(ctxT(t))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.NotNil(t, getRow(t, db, id).FailedAt)
		requeued, err := outbox.Requeue(ctxT(t), storeOf(t, db), []uuid.UUID{id})
		require.NoError(t, err)
		require.EqualValues(t, 1, requeued)

		// C claims it again: attempt 1, the same count as A's stale claim.
		cEntered, cResult := make(chan struct{}), make(chan error)
		c := newRelay(t, db, testConfig(), handle(func(context.Context, outbox.Message) error {
			close(cEntered)
			return <-cResult
		}))
		cDone := runBlocked(t, c, context.Background(), cEntered)
		require.Equal(t, 1, getRow(t, db, id).Attempts, "C's claim has A's attempt count")

		// A wakes up and fails permanently: it must change nothing.
		aResult <- outbox.Permanent(errors.New("A gives up late"))
		require.NoError(t, <-aDone)
		live := getRow(t, db, id)
		require.Nil(t, live.FailedAt, "a stale claim cannot dead-letter a row claimed again after a requeue")
		require.NotNil(t, live.ClaimedUntil, "C's claim is still live")

		// C delivers: the row is processed, not failed.
		cResult <- nil
		require.NoError(t, <-cDone)
		final := getRow(t, db, id)
		require.NotNil(t, final.ProcessedAt, "C's delivery is recorded")
		require.Nil(t, final.FailedAt)
	})
}

func TestRelayDeadLettersClaimsThatNeverSettle(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)
		cfg := testConfig()
		cfg.MaxAttempts = 3
		id := appendEvents(t, db, thing{N: 1})[0]

		// Every claim "dies": its handler never returns until the test ends, and
		// the lease is made to run out as if the process had been killed.
		stuck, cancel := context.WithCancel(context.Background())
		// The stuck RunOnce calls end when the test does, and log through t
		// as they settle: wait for them before t is done (a data race
		// otherwise, once in CI).
		var running []<-chan error
		t.Cleanup(func() {
			cancel()
			for _, done := range running {
				if err := <-done; err != nil {
					t.Logf("a stuck RunOnce ended with %v", err)
				}
			}
		})
		var calls int
		for attempt := 1; attempt <= cfg.MaxAttempts; attempt++ {
			entered := make(chan struct{})
			r := newRelay(t, db, cfg, handle(func(ctx context.Context, m outbox.Message) error {
				calls++
				close(entered)
				<-ctx.Done()
				return ctx.Err()
			}))
			running = append(running, runBlocked(t, r, stuck, entered))
			require.Equal(t, attempt, getRow(t, db, id).Attempts)
			exec(t, db, `UPDATE outbox_events SET claimed_until = $2 WHERE id = $1`, id, time.Now().Add(-time.Second).UnixMilli())
		}

		// The next claim finds the attempts used up: it dead-letters the row
		// instead of dispatching it.
		var dispatched bool
		r := newRelay(t, db, cfg, handle(func(context.Context, outbox.Message) error {
			dispatched = true
			return nil
		}))
		_, err := r.RunOnce(ctxT(t))
		require.NoError(t, err)
		require.False(t, dispatched, "a row whose attempts are used up is not dispatched again")
		got := getRow(t, db, id)
		require.NotNil(t, got.FailedAt, "dead-lettered")
		require.Equal(t, cfg.MaxAttempts, got.Attempts, "ends with attempts == MaxAttempts")
		require.Nil(t, got.ClaimedUntil)
		require.NotNil(t, got.LastError)
		require.Contains(t, *got.LastError, "never settled")

		// And it is never claimed again, however long one waits.
		exec(t, db, `UPDATE outbox_events SET available_at = 0`)
		n, err := r.RunOnce(ctxT(t))
		require.NoError(t, err)
		require.Zero(t, n)
		again := getRow(t, db, id)
		require.Equal(t, got.FailedAt, again.FailedAt)
		require.Equal(t, cfg.MaxAttempts, again.Attempts)
		require.Equal(t, cfg.MaxAttempts, calls)
	})
}

package outbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

// claimOne appends one row and claims it with a relay that is never started.
func claimOne(t *testing.T) (*Relay, *pgtest.DB, job) {
	t.Helper()
	r, db, jobs := claimRows(t, 1)
	return r, db, jobs[0]
}

// claimRows appends n rows and claims them (as a tick would, never dispatched)
// with a relay that is not started.
func claimRows(t *testing.T, n int) (*Relay, *pgtest.DB, []job) {
	t.Helper()
	db := pgtest.New(t, migrations.Labeling)
	ctx := t.Context()
	tx, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	for range n {
		_, err := Append(ctx, NewPostgresStore(nil), postgres.TxOf(tx), internalEvent{})
		require.NoError(t, err)
	}
	require.NoError(t, tx.Commit(ctx))
	r, err := NewRelay(NewPostgresStore(db.Pool), Config{
		PollInterval: time.Hour, ClaimSize: 10, HandlerTimeout: time.Second, Lease: time.Hour,
		MaxAttempts: 3, RetryBase: time.Second, RetryMax: time.Minute, ProcessedRetention: time.Hour,
	}, nil, nil)
	require.NoError(t, err)
	got, err := r.claim(ctx, 10, 0)
	require.NoError(t, err)
	require.Len(t, got.jobs, n)
	return r, db, got.jobs
}

func processedAt(t *testing.T, db *pgtest.DB, j job) *int64 {
	t.Helper()
	var at *int64
	require.NoError(t, db.Pool.QueryRow(t.Context(),
		`SELECT processed_at FROM outbox_events WHERE id = $1`, j.ID).Scan(&at))
	return at
}

func TestSettleOneOutcomePerClaim(t *testing.T) {
	t.Parallel()
	for _, order := range []string{"release first", "release last"} {
		t.Run("a delivered row flushed with a release of its claim ("+order+") stays processed", func(t *testing.T) {
			t.Parallel()
			r, db, j := claimOne(t)
			done := r.outcomeOf(j, nil, time.Now())
			if order == "release first" {
				r.settler.add(r.release(j), done)
			} else {
				r.settler.add(done, r.release(j))
			}
			require.NoError(t, r.settler.flushAll(t.Context()))
			require.NotNil(t, processedAt(t, db, j), "the real outcome wins over the release")
		})
	}

	t.Run("while closing, a real outcome replaces a waiting release and a late release is dropped", func(t *testing.T) {
		t.Parallel()
		r, _, j := claimOne(t)
		s := r.settler
		s.mu.Lock()
		s.closed = true
		s.mu.Unlock()
		done := r.outcomeOf(j, nil, time.Now())
		s.add(r.release(j))
		s.add(done)
		s.add(r.release(j))
		s.mu.Lock()
		defer s.mu.Unlock()
		require.Len(t, s.pending, 1)
		require.Equal(t, kindProcessed, s.pending[0].kind)
	})
}

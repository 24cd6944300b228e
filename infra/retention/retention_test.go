package retention_test

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

const keep = 30 * 24 * time.Hour

// bundle is a billing database holding old and young receipts, and a policy over
// them that counts its statements.
type bundle struct {
	pool       *pgxpool.Pool
	policy     retention.Policy
	statements *atomic.Int32
}

func setup(t *testing.T, oldRows, youngRows int) bundle {
	t.Helper()
	db := pgtest.New(t, migrations.Billing)
	now := time.Now()
	insert := func(n int, at time.Time) {
		_, err := db.Pool.Exec(context.Background(), `
			INSERT INTO billing_receipts (event_id, created_at)
			SELECT gen_random_uuid(), $1::bigint FROM generate_series(1, $2::int)`, at.UnixMilli(), n)
		require.NoError(t, err)
	}
	insert(oldRows, now.Add(-keep-time.Hour))
	insert(youngRows, now.Add(-keep+time.Hour))

	var statements atomic.Int32
	policy := retention.Policy{
		Name: "billing_receipts",
		Keep: keep,
		Delete: func(ctx context.Context, before int64, limit int) (int64, error) {
			statements.Add(1)
			tag, err := db.Pool.Exec(ctx, `
				DELETE FROM billing_receipts WHERE event_id IN (
					SELECT event_id FROM billing_receipts WHERE created_at < $1 LIMIT $2)`, before, limit)
			return tag.RowsAffected(), err
		},
	}
	return bundle{pool: db.Pool, policy: policy, statements: &statements}
}

func receipts(t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM billing_receipts`).Scan(&n))
	return n
}

func logger(t *testing.T) *slog.Logger { return slog.New(slog.NewTextHandler(t.Output(), nil)) }

func TestRunOnce(t *testing.T) {
	t.Parallel()

	t.Run("deletes old rows in chunks until a chunk comes back short", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 35, 5)
		c := retention.New(retention.Config{Interval: time.Hour, Chunk: 10}, []retention.Policy{b.policy}, logger(t))

		deleted, err := c.RunOnce(t.Context())
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"billing_receipts": 35}, deleted)
		require.EqualValues(t, 4, b.statements.Load(), "10 + 10 + 10 + 5: no statement deletes more than a chunk")
		require.Equal(t, 5, receipts(t, b.pool), "rows inside the window are kept")
	})

	t.Run("running twice does no harm", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 20, 5)
		c := retention.New(retention.Config{Interval: time.Hour, Chunk: 10}, []retention.Policy{b.policy}, logger(t))
		_, err := c.RunOnce(t.Context())
		require.NoError(t, err)
		deleted, err := c.RunOnce(t.Context())
		require.NoError(t, err)
		require.Equal(t, map[string]int64{"billing_receipts": 0}, deleted)
		require.Equal(t, 5, receipts(t, b.pool))
	})

	t.Run("a failing policy does not keep the others from running", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 3, 1)
		broken := retention.Policy{Name: "broken", Keep: time.Hour,
			Delete: func(context.Context, int64, int) (int64, error) {
				return 0, errors.New("relation does not exist")
			}}
		c := retention.New(retention.Config{Interval: time.Hour}, []retention.Policy{broken, b.policy}, logger(t))
		deleted, err := c.RunOnce(t.Context())
		require.ErrorContains(t, err, "retention of broken: relation does not exist")
		require.EqualValues(t, 3, deleted["billing_receipts"])
		require.Equal(t, 1, receipts(t, b.pool))
	})

	t.Run("a policy that keeps nothing is refused, not run", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 3, 1)
		b.policy.Keep = 0
		c := retention.New(retention.Config{Interval: time.Hour}, []retention.Policy{b.policy}, logger(t))
		_, err := c.RunOnce(t.Context())
		require.ErrorContains(t, err, "invalid policy")
		require.Equal(t, 4, receipts(t, b.pool))
		require.Zero(t, b.statements.Load())
	})
}

func TestCleanup(t *testing.T) {
	t.Parallel()

	t.Run("runs once at start and then every interval until stopped", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 3, 1)
		c := retention.New(retention.Config{Interval: 20 * time.Millisecond}, []retention.Policy{b.policy}, logger(t))
		require.NoError(t, c.Start(t.Context()))
		require.Eventually(t, func() bool { return receipts(t, b.pool) == 1 }, 10*time.Second, 10*time.Millisecond)
		require.Eventually(t, func() bool { return b.statements.Load() >= 3 }, 10*time.Second, 10*time.Millisecond,
			"runs again each interval")
		require.NoError(t, c.Stop(t.Context()))
		require.NoError(t, c.Stop(t.Context()), "stop twice is harmless")
	})

	t.Run("the first run does not wait for the interval", func(t *testing.T) {
		t.Parallel()
		b := setup(t, 3, 1)
		c := retention.New(retention.Config{Interval: time.Hour}, []retention.Policy{b.policy}, logger(t))
		require.NoError(t, c.Start(t.Context()))
		t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
		require.Eventually(t, func() bool { return receipts(t, b.pool) == 1 }, 10*time.Second, 10*time.Millisecond)
	})

	t.Run("a failing run is not fatal: the next interval runs again", func(t *testing.T) {
		t.Parallel()
		var calls atomic.Int32
		flaky := retention.Policy{Name: "flaky", Keep: time.Hour,
			Delete: func(context.Context, int64, int) (int64, error) {
				calls.Add(1)
				return 0, errors.New("database unavailable")
			}}
		c := retention.New(retention.Config{Interval: 20 * time.Millisecond}, []retention.Policy{flaky}, logger(t))
		require.NoError(t, c.Start(t.Context()))
		t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
		require.Eventually(t, func() bool { return calls.Load() >= 3 }, 10*time.Second, 10*time.Millisecond)
	})

	t.Run("start twice or without an interval is an error", func(t *testing.T) {
		t.Parallel()
		c := retention.New(retention.Config{Interval: time.Hour}, nil, logger(t))
		require.NoError(t, c.Start(t.Context()))
		require.ErrorContains(t, c.Start(t.Context()), "already started")
		require.NoError(t, c.Stop(t.Context()))

		bad := retention.New(retention.Config{}, nil, logger(t))
		require.ErrorContains(t, bad.Start(t.Context()), "interval must be positive")
	})
}

package drain

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/bench/internal/db"
	"github.com/acme/outboxpair/bench/internal/sitting"
)

// testEnv is an Env on TEST_DATABASE_URL's server, or a skip when that
// variable is unset. Its databases are dropped at the test's end.
func testEnv(t *testing.T) (*sitting.Env, context.Context) {
	t.Helper()
	dbURL := os.Getenv("TEST_DATABASE_URL")
	if dbURL == "" {
		t.Skip("TEST_DATABASE_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e, err := sitting.NewEnv(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(e.Close)
	return e, ctx
}

// TestProbesStayOnAnIndex: the drains' completion probes read an index on an
// analyzed table whose every row is backlog, the case where a count(*) or an
// EXISTS is planned as a sequential scan; and so do the probes from the key
// the first one returned, which find the same first unfinished row.
func TestProbesStayOnAnIndex(t *testing.T) {
	t.Parallel()
	e, ctx := testEnv(t)
	const n = 20000
	for _, tc := range []struct {
		name  string
		s     sitting.Schema
		fill  func(*testing.T, *pgxpool.Pool)
		table string
		probe string
		from  func(string) string
	}{
		{"outbox probe uses the pending index", sitting.SchemaLabeling, func(t *testing.T, p *pgxpool.Pool) {
			require.NoError(t, db.Preload(ctx, p, n))
		}, "outbox_events", pendingProbe, pendingFrom},
		{"river probe uses its fetching index", sitting.SchemaRiver, func(t *testing.T, p *pgxpool.Pool) {
			_, err := p.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
				SELECT '{}', 'bench_noop', 25, 'default', 'available', now() FROM generate_series(1, $1::int)`, n)
			require.NoError(t, err)
		}, "river_job", riverPendingProbe, riverPendingFrom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dbURL, err := e.Create(ctx, tc.s)
			require.NoError(t, err)
			pool, err := pgxpool.New(ctx, dbURL)
			require.NoError(t, err)
			t.Cleanup(pool.Close)
			tc.fill(t, pool)
			_, err = pool.Exec(ctx, "ANALYZE "+tc.table)
			require.NoError(t, err)
			var key string
			require.NoError(t, pool.QueryRow(ctx, tc.probe).Scan(&key))
			var again string
			require.NoError(t, pool.QueryRow(ctx, tc.from(key)).Scan(&again))
			require.Equal(t, key, again, "the probe from its own key finds the same first unfinished row")
			for _, probe := range []string{tc.probe, tc.from(key)} {
				rows, err := pool.Query(ctx, "EXPLAIN "+probe)
				require.NoError(t, err)
				lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
				require.NoError(t, err)
				text := strings.Join(lines, "\n")
				require.NotContains(t, text, "Seq Scan", "the probe scans the table:\n%s", text)
				require.Contains(t, text, "Index", "the probe reads no index:\n%s", text)
			}
		})
	}
}

package main

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// testBench is a bench on TEST_DATABASE_URL's server with the binaries'
// relay settings, or a skip when that variable is unset. Its databases are
// dropped at the test's end.
func testBench(t *testing.T) (*bench, context.Context) {
	t.Helper()
	dbURL := os.Getenv("TEST_DATABASE_URL")
	if dbURL == "" {
		t.Skip("TEST_DATABASE_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	e, err := newEnv(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(e.close)
	cfg, err := relayConfig(func(string) (string, bool) { return "", false }, "")
	require.NoError(t, err)
	return &bench{opt: options{drainLimit: time.Minute}, env: e, res: newResults(), relayCfg: cfg, tmp: t.TempDir()}, ctx
}

func openT(t *testing.T, ctx context.Context, dbURL string) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestPairScript runs the pair reference's script, built from the statements
// the relay of this tree sends, through pgbench for a fixed number of units:
// every event it claims is applied at billing and settled, and nothing is left
// claimed, so its rate is the rate of whole events.
func TestPairScript(t *testing.T) {
	t.Parallel()
	b, ctx := testBench(t)
	var err error
	b.pgbenchPath, err = exec.LookPath("pgbench")
	require.NoError(t, err, "pgbench must be in PATH (Debian: postgresql-client)")
	p, err := b.capturePairSQL(ctx)
	require.NoError(t, err)
	script, unit, err := pairScript(p, b.relayCfg.ClaimSize, consumerScript)
	require.NoError(t, err)
	dbURL, err := b.env.create(ctx, schemaPair)
	require.NoError(t, err)
	pool := openT(t, ctx, dbURL)
	const clients, units, per = 2, 3, 2000
	require.NoError(t, preloadOutbox(ctx, pool, clients*per))
	var base int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(created_at) FROM outbox_events`).Scan(&base))
	pgURL, err := pairURL(dbURL, true)
	require.NoError(t, err)
	f := b.tmp + "/pair.sql"
	require.NoError(t, os.WriteFile(f, []byte(script), 0o600))
	out, err := exec.CommandContext(ctx, b.pgbenchPath, "-n", "-M", "prepared", "-f", f, "-c", strconv.Itoa(clients),
		"-t", strconv.Itoa(units), "-D", "u=0", "-D", "floor=0", "-D", "base="+strconv.FormatInt(base, 10), "-D", "per="+strconv.Itoa(per), pgURL).CombinedOutput()
	require.NoError(t, err, "%s", out)

	want := int64(clients * units * unit)
	var processed, claimed, receipts, quota, parts int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE processed_at IS NOT NULL), count(*) FILTER (WHERE claim_token IS NOT NULL),
		count(DISTINCT (created_at - $1::bigint) / $2::bigint) FILTER (WHERE processed_at IS NOT NULL) FROM outbox_events`, base, per).Scan(&processed, &claimed, &parts))
	require.NoError(t, pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM billing.billing_receipts), (SELECT coalesce(sum(active_rules), 0) FROM billing.billing_quota)`).Scan(&receipts, &quota))
	require.Equal(t, want, processed, "every claimed event is settled processed")
	require.Zero(t, claimed, "no claim is left unsettled")
	require.Equal(t, want, receipts, "billing's transaction ran once per event")
	require.Equal(t, want, quota)
	require.Equal(t, int64(clients), parts, "each client claimed from its own part of the backlog")
}

// TestProbesStayOnAnIndex: the drains' completion probes read an index on an
// analyzed table whose every row is backlog, the case where a count(*) or an
// EXISTS is planned as a sequential scan; and so do the probes from the key
// the first one returned, which find the same first unfinished row.
func TestProbesStayOnAnIndex(t *testing.T) {
	t.Parallel()
	b, ctx := testBench(t)
	const n = 20000
	for _, tc := range []struct {
		name  string
		s     schema
		fill  func(*testing.T, *pgxpool.Pool)
		table string
		probe string
		from  func(string) string
	}{
		{"outbox probe uses the pending index", schemaLabeling, func(t *testing.T, p *pgxpool.Pool) {
			require.NoError(t, preloadOutbox(ctx, p, n))
		}, "outbox_events", pendingProbe, pendingFrom},
		{"river probe uses its fetching index", schemaRiver, func(t *testing.T, p *pgxpool.Pool) {
			_, err := p.Exec(ctx, `INSERT INTO river_job (args, kind, max_attempts, queue, state, scheduled_at)
				SELECT '{}', 'bench_noop', 25, 'default', 'available', now() FROM generate_series(1, $1::int)`, n)
			require.NoError(t, err)
		}, "river_job", riverPendingProbe, riverPendingFrom},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dbURL, err := b.env.create(ctx, tc.s)
			require.NoError(t, err)
			pool := openT(t, ctx, dbURL)
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

// TestFillOutboxWritesAppendsIDs: the drains' backlog has the ids Append
// writes, UUIDv7 of each row's created_at, so the primary key is in time order.
func TestFillOutboxWritesAppendsIDs(t *testing.T) {
	t.Parallel()
	b, ctx := testBench(t)
	dbURL, err := b.env.create(ctx, schemaLabeling)
	require.NoError(t, err)
	pool := openT(t, ctx, dbURL)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, fillOutbox(ctx, tx, 1000))
	require.NoError(t, tx.Commit(ctx))
	rows, err := pool.Query(ctx, `SELECT id, created_at FROM outbox_events ORDER BY id`)
	require.NoError(t, err)
	type row struct {
		ID        uuid.UUID
		CreatedAt int64
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[row])
	require.NoError(t, err)
	require.Len(t, got, 1000)
	for i, r := range got {
		require.Equal(t, uuid.Version(7), r.ID.Version(), "row %d: %s", i, r.ID)
		require.Equal(t, uuid.RFC4122, r.ID.Variant(), "row %d: %s", i, r.ID)
		sec, nsec := r.ID.Time().UnixTime()
		require.Equal(t, r.CreatedAt, sec*1000+nsec/1e6, "row %d: the id's time is its created_at", i)
		if i > 0 {
			require.Greater(t, r.CreatedAt, got[i-1].CreatedAt, "ids sort as created_at does")
		}
	}
}

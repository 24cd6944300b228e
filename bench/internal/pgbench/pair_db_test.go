package pgbench

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/bench/internal/db"
	"github.com/acme/outboxpair/bench/internal/sitting"
)

// testSitting is a sitting on TEST_DATABASE_URL's server with the binaries'
// relay settings, or a skip when that variable is unset. Its databases are
// dropped at the test's end.
func testSitting(t *testing.T) (*sitting.Sitting, context.Context) {
	t.Helper()
	dbURL := os.Getenv("TEST_DATABASE_URL")
	if dbURL == "" {
		t.Skip("TEST_DATABASE_URL is not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s, err := sitting.New(ctx, sitting.Options{DB: dbURL, DrainLimit: time.Minute}, func(string) (string, bool) { return "", false }, t.TempDir())
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s, ctx
}

// TestPairScript runs the pair reference's script, built from the statements
// the relay of this tree sends, through pgbench for a fixed number of units:
// every event it claims is applied at billing and settled, and nothing is left
// claimed, so its rate is the rate of whole events.
func TestPairScript(t *testing.T) {
	t.Parallel()
	s, ctx := testSitting(t)
	var err error
	s.PgbenchPath, err = exec.LookPath("pgbench")
	require.NoError(t, err, "pgbench must be in PATH (Debian: postgresql-client)")
	p, err := capturePairSQL(ctx, s)
	require.NoError(t, err)
	script, unit, err := pairScript(p, s.Relay.ClaimSize, ConsumerScript)
	require.NoError(t, err)
	dbURL, err := s.Env.Create(ctx, sitting.SchemaPair)
	require.NoError(t, err)
	pool, err := pgxpool.New(ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	const clients, units, per = 2, 3, 2000
	require.NoError(t, db.Preload(ctx, pool, clients*per))
	var base int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT min(created_at) FROM outbox_events`).Scan(&base))
	pgURL, err := sitting.PairURL(dbURL, true)
	require.NoError(t, err)
	f := s.Tmp + "/pair.sql"
	require.NoError(t, os.WriteFile(f, []byte(script), 0o600))
	out, err := exec.CommandContext(ctx, s.PgbenchPath, "-n", "-M", "prepared", "-f", f, "-c", strconv.Itoa(clients),
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

package pgtest

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func TestSweep(t *testing.T) {
	t.Parallel()

	t.Run("drops a killed run's databases and keeps recent ones and templates", func(t *testing.T) {
		t.Parallel()
		ctx := context.Background()
		admin := ServerURL(t)
		old := fmt.Sprintf("pgtest_%d_%s", time.Now().Add(-2*staleAfter).Unix(), randomHex(6))
		recent := fmt.Sprintf("pgtest_%d_%s", time.Now().Unix(), randomHex(6))
		tmpl := "pgtest_tmpl_sweep" + randomHex(6)
		for _, name := range []string{old, recent, tmpl} {
			require.NoError(t, exec(ctx, admin, "CREATE DATABASE "+ident(name)))
			t.Cleanup(func() { _ = exec(context.Background(), admin, "DROP DATABASE IF EXISTS "+ident(name)) })
		}

		sweep(ctx, admin)

		conn, err := pgx.Connect(ctx, admin)
		require.NoError(t, err)
		defer conn.Close(ctx)
		exists := func(name string) bool {
			var n int
			require.NoError(t, conn.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = $1", name).Scan(&n))
			return n == 1
		}
		require.False(t, exists(old), "a database older than the stale age is dropped")
		require.True(t, exists(recent), "a database of a run that may still be going is kept")
		require.True(t, exists(tmpl), "templates are kept")
	})
}

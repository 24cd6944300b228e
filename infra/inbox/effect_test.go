package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// TestTx: an EffectFunc's SQL is the same on both dialects: $N is the Nth
// argument wherever it stands, and a missing row is inbox.ErrNoRows.
func TestTx(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("$N is the Nth argument in any order, and no row is ErrNoRows", func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, d, ledger.Migrations)
			ctx := context.Background()
			err := inbox.Read(ctx, db.DB, func(tx inbox.Tx) error {
				var s string
				require.NoError(t, tx.QueryRow(ctx, `SELECT CAST($2 AS text) || CAST($1 AS text) || CAST($2 AS text)`, "a", "b").Scan(&s))
				require.Equal(t, "bab", s)
				var n int64
				err := tx.QueryRow(ctx, `SELECT created_at FROM ledger_receipts WHERE created_at = $1`, int64(1)).Scan(&n)
				require.True(t, errors.Is(err, inbox.ErrNoRows), "%v", err)
				rows, err := tx.Query(ctx, `SELECT created_at FROM ledger_receipts`)
				require.NoError(t, err)
				require.False(t, rows.Next())
				require.NoError(t, rows.Err())
				rows.Close()
				return nil
			})
			require.NoError(t, err)
		})
	})
}

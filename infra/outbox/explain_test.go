package outbox_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
)

func TestClaimUsesPendingIndex(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	now := time.Now().UnixMilli()
	// 20,000 processed rows and a few pending ones: the claim must read the
	// pending rows through the partial index, not scan the settled history.
	exec(t, db.Pool, `
		INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, processed_at)
		SELECT gen_random_uuid(), 'Thing', '{}', $1::bigint - g, $1::bigint - g, 1, $1::bigint
		FROM generate_series(1, 20000) g`, now)
	appendEvents(t, db.Pool, things(5)...)
	exec(t, db.Pool, `ANALYZE outbox_events`)

	lease := time.Minute.Milliseconds()
	args := []any{now, now + lease, now + 2*lease, 10}

	plan := func(t *testing.T, setting string) string {
		conn, err := db.Pool.Acquire(ctxT(t))
		require.NoError(t, err)
		defer conn.Release()
		// A prepared statement is what pgx runs; after a few executions the
		// server may switch it to a generic plan, which must use the index too.
		_, err = conn.Exec(ctxT(t), `SET plan_cache_mode = `+setting)
		require.NoError(t, err)
		_, err = conn.Exec(ctxT(t), `PREPARE claim(bigint, bigint, bigint, integer) AS `+outbox.ClaimSQL)
		require.NoError(t, err)
		defer conn.Exec(ctxT(t), `DEALLOCATE claim; RESET plan_cache_mode`) //nolint:errcheck
		// EXECUTE takes no bind parameters; these are integers the test made.
		rows, err := conn.Query(ctxT(t), fmt.Sprintf(`EXPLAIN EXECUTE claim(%d, %d, %d, %d)`, args...))
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		return strings.Join(lines, "\n")
	}

	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		t.Run("the inner select reads outbox_events_pending_idx with a "+mode, func(t *testing.T) {
			p := plan(t, mode)
			t.Logf("claim plan (%s):\n%s", mode, p)
			require.Contains(t, p, "outbox_events_pending_idx")
			require.NotContains(t, p, "Seq Scan")
		})
	}
}

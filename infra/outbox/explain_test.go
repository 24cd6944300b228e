package outbox_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
)

// TestPlansStayOnIndexes proves that the claim reads the pending index and the
// settle the primary key, whatever the planner believes about the table: never
// analyzed, analyzed while empty (the normal state of a fresh deploy), analyzed
// with history and no backlog before a backlog builds (the normal steady
// state), or analyzed with a large backlog and history. A settle that matched the pending
// index's predicate once scanned that index and filtered on id (10 ms a row
// with a 50k backlog instead of 0.1 ms), which made draining a backlog
// quadratic. The claim's generic plan is the one the relay runs (its
// connections force it, see outbox.ConnParams), so the claim is checked for
// every claim size the relay may be configured with.
func TestPlansStayOnIndexes(t *testing.T) {
	t.Parallel()
	const pending, settled = 50_000, 100_000

	fill := func(t *testing.T, db *pgtest.DB) {
		now := time.Now().UnixMilli()
		exec(t, pg(db.Pool), `
			INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, processed_at)
			SELECT gen_random_uuid(), 'Thing', '{}', $1::bigint - g, $1::bigint - g, 1, $1::bigint
			FROM generate_series(1, $2::int) g`, now-time.Hour.Milliseconds(), settled)
		exec(t, pg(db.Pool), `
			INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
			SELECT gen_random_uuid(), 'Thing', '{}', $1::bigint + g, $1::bigint + g, 0
			FROM generate_series(1, $2::int) g`, now-time.Hour.Milliseconds(), pending)
	}
	states := map[string]func(t *testing.T, db *pgtest.DB){
		"never analyzed": fill,
		"analyzed while empty": func(t *testing.T, db *pgtest.DB) {
			exec(t, pg(db.Pool), `ANALYZE outbox_events`)
			fill(t, db)
		},
		"analyzed full": func(t *testing.T, db *pgtest.DB) {
			fill(t, db)
			exec(t, pg(db.Pool), `ANALYZE outbox_events`)
		},
		// The steady state: vacuumed and analyzed with history and no backlog, so
		// the planner believes the pending index nearly empty; then a backlog
		// builds. The settle of v1 (which repeated the index's predicate) then
		// scanned the pending index and filtered on id.
		"analyzed with history and no backlog, then a backlog": func(t *testing.T, db *pgtest.DB) {
			now := time.Now().UnixMilli()
			exec(t, pg(db.Pool), `
				INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, processed_at)
				SELECT gen_random_uuid(), 'Thing', '{}', $1::bigint - g, $1::bigint - g, 1, $1::bigint
				FROM generate_series(1, $2::int) g`, now-time.Hour.Milliseconds(), settled)
			exec(t, pg(db.Pool), `VACUUM ANALYZE outbox_events`)
			exec(t, pg(db.Pool), `
				INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
				SELECT gen_random_uuid(), 'Thing', '{}', $1::bigint + g, $1::bigint + g, 0
				FROM generate_series(1, $2::int) g`, now-time.Hour.Milliseconds(), pending)
		},
		"vacuumed and analyzed full": func(t *testing.T, db *pgtest.DB) {
			fill(t, db)
			exec(t, pg(db.Pool), `VACUUM ANALYZE outbox_events`)
		},
	}
	// A backlog and no history, vacuumed and analyzed as autovacuum leaves it
	// (the migration's settings vacuum and analyze the outbox every 10k
	// inserts): a benchmark's drain, or a consumer that was down for a while.
	// The generic plan of the claim's earlier form, a CTE with LIMIT $4 joined
	// by UPDATE ... FROM, guessed a tenth of the pending rows and, at 10k of
	// them, hash-joined them over a sequential scan of the table.
	//
	// At 10k rows a custom plan of the settle hash-joins over a sequential
	// scan too (the whole table is a few hundred pages); the relay runs only
	// generic plans (outbox.ConnParams), so there only those are checked.
	genericOnly := map[string]bool{}
	for _, backlog := range []int{10_000, 100_000} {
		state := fmt.Sprintf("vacuumed and analyzed with a backlog of %d and no history", backlog)
		genericOnly[state] = backlog < 50_000
		states[state] = func(t *testing.T, db *pgtest.DB) {
			now := time.Now().UnixMilli()
			exec(t, pg(db.Pool), `
				INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
				SELECT gen_random_uuid(), 'Thing', '{}', $1::bigint + g, $1::bigint + g, 0
				FROM generate_series(1, $2::int) g`, now-time.Hour.Milliseconds(), backlog)
			exec(t, pg(db.Pool), `VACUUM ANALYZE outbox_events`)
		}
	}
	// A million-row outbox, as the planner sees it: the states above, analyzed,
	// then with the table's and its indexes' row counts in pg_class scaled up
	// (the planner takes a table's rows as reltuples / relpages times its pages
	// now), so that the plans are costed for millions of rows without writing
	// them. Autovacuum is off for the table, which would otherwise overwrite
	// the counts with the real ones.
	for _, big := range []struct {
		name    string
		prepare func(t *testing.T, db *pgtest.DB)
		factor  int
	}{
		{"analyzed as 1M settled rows and 500k pending", states["analyzed full"], 10},
		{"vacuumed and analyzed as a backlog of 1M and no history", states["vacuumed and analyzed with a backlog of 100000 and no history"], 10},
		{"vacuumed and analyzed as 2M settled rows and a backlog of 1M", states["vacuumed and analyzed full"], 20},
	} {
		states[big.name] = func(t *testing.T, db *pgtest.DB) {
			exec(t, pg(db.Pool), `ALTER TABLE outbox_events SET (autovacuum_enabled = false)`)
			big.prepare(t, db)
			exec(t, pg(db.Pool), `ANALYZE outbox_events`)
			exec(t, pg(db.Pool), `
				UPDATE pg_class SET reltuples = reltuples * $1::int
				WHERE oid = 'outbox_events'::regclass
					OR oid IN (SELECT indexrelid FROM pg_index WHERE indrelid = 'outbox_events'::regclass)`, big.factor)
			var rows float64
			require.NoError(t, db.Pool.QueryRow(ctxT(t), `SELECT reltuples FROM pg_class WHERE oid = 'outbox_events'::regclass`).Scan(&rows))
			require.GreaterOrEqual(t, rows, 1e6, "the planner's row count of the table")
		}
	}
	for state, prepare := range states {
		t.Run(state, func(t *testing.T) {
			t.Parallel()
			db := newDB(t)
			prepare(t, db)
			now := time.Now().UnixMilli()
			lease := time.Minute.Milliseconds()
			ids := make([]string, 50)
			for i := range ids {
				ids[i] = uuid.NewString()
			}
			idList := "'{" + strings.Join(ids, ",") + "}'"
			tokList := "'{" + strings.Repeat(uuid.NewString()+",", len(ids)-1) + uuid.NewString() + "}'"
			kinds := "'{" + strings.TrimSuffix(strings.Repeat("processed,", len(ids)), ",") + "}'"
			ats := "'{" + strings.TrimSuffix(strings.Repeat(fmt.Sprint(now)+",", len(ids)), ",") + "}'"
			errs := "'{" + strings.TrimSuffix(strings.Repeat("NULL,", len(ids)), ",") + "}'"

			for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
				t.Run("the claim reads outbox_events_pending_idx and the primary key with a "+mode, func(t *testing.T) {
					for _, size := range []int{10, 100, 1000} {
						for _, floor := range []int64{0, now - time.Minute.Milliseconds()} {
							p := explain(t, db, mode, "claim(bigint, bigint, bigint, integer, bigint, integer, uuid, text)", outbox.ClaimSQL(size),
								fmt.Sprintf("%d, %d, %d, %d, %d, %d, '%s', ''", now, now+lease, lease, max(1, size/3), floor, 10, uuid.NewString()))
							require.Contains(t, p, "Index Scan using outbox_events_pending_idx", p)
							require.Contains(t, p, "outbox_events_pkey", p)
							require.NotContains(t, p, "Seq Scan", p)
							require.NotContains(t, p, "Hash Join", p)
							// A bitmap scan of the pending index loses its order:
							// the limit would be applied after reading every
							// pending row.
							require.NotContains(t, p, "Bitmap Index Scan on outbox_events_pending_idx", p)
						}
					}
				})
				if genericOnly[state] && mode != "force_generic_plan" {
					// A table this small may be scanned by a custom plan; the
					// relay's plans are generic, which the other mode checks.
					continue
				}
				t.Run("the settle reads the primary key with a "+mode, func(t *testing.T) {
					p := explain(t, db, mode, "settle(uuid[], uuid[], text[], bigint[], text[])", outbox.SettleSQL,
						strings.Join([]string{idList, tokList, kinds, ats, errs}, ", "))
					require.Contains(t, p, "outbox_events_pkey", p)
					require.NotContains(t, p, "outbox_events_pending_idx", p)
					require.NotContains(t, p, "Seq Scan on outbox_events", p)
				})
			}
		})
	}
}

// explain is the plan of sql prepared as name (with its parameter types) and
// executed with args under plan_cache_mode = mode. A prepared statement is what
// pgx runs; after a few executions the server may switch it to a generic plan,
// which must use the index too.
func explain(t *testing.T, db *pgtest.DB, mode, name, sql, args string) string {
	t.Helper()
	conn, err := db.Pool.Acquire(ctxT(t))
	require.NoError(t, err)
	defer conn.Release()
	stmt := name[:strings.Index(name, "(")]
	_, err = conn.Exec(ctxT(t), `SET plan_cache_mode = `+mode)
	require.NoError(t, err)
	_, err = conn.Exec(ctxT(t), `PREPARE `+name+` AS `+sql)
	require.NoError(t, err)
	defer conn.Exec(ctxT(t), `DEALLOCATE `+stmt+`; RESET plan_cache_mode`) //nolint:errcheck
	// EXECUTE takes no bind parameters; these are literals the test made.
	rows, err := conn.Query(ctxT(t), `EXPLAIN EXECUTE `+stmt+`(`+args+`)`)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	plan := strings.Join(lines, "\n")
	t.Logf("%s plan (%s):\n%s", stmt, mode, plan)
	return plan
}

// TestPlansPreparedOnAnEmptyOutbox: a relay's connection prepares its claim and
// settle on the outbox it starts on, usually empty, and keeps those generic
// plans while a backlog builds, with no ANALYZE in between. Planned on an empty
// table, the settle hash-joined over a sequential scan of the whole table for
// every batch (19 ms at 100k rows): the drain of a never-analyzed backlog of
// 100k rows ran at a tenth of its rate at 10k.
func TestPlansPreparedOnAnEmptyOutbox(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	conn, err := db.Pool.Acquire(ctxT(t))
	require.NoError(t, err)
	defer conn.Release()
	for k, v := range outbox.ConnParams() {
		_, err := conn.Exec(ctxT(t), `SELECT set_config($1, $2, false)`, k, v)
		require.NoError(t, err)
	}
	now := time.Now().UnixMilli()
	lease := time.Minute.Milliseconds()
	claimArgs := fmt.Sprintf("%d, %d, %d, %d, %d, %d, '%s', ''", now, now+lease, lease, 40, 0, 10, uuid.NewString())
	settleArgs := func(ids string) string {
		return ids + ", array_fill('" + uuid.NewString() + "'::uuid, ARRAY[40]), array_fill('processed'::text, ARRAY[40]), " +
			fmt.Sprintf("array_fill(%d::bigint, ARRAY[40]), array_fill(NULL::text, ARRAY[40])", now)
	}
	_, err = conn.Exec(ctxT(t), `PREPARE claim(bigint, bigint, bigint, integer, bigint, integer, uuid, text) AS `+outbox.ClaimSQL(40))
	require.NoError(t, err)
	_, err = conn.Exec(ctxT(t), `PREPARE settle(uuid[], uuid[], text[], bigint[], text[]) AS `+outbox.SettleSQL)
	require.NoError(t, err)
	// First executions on the empty table: the generic plans are made now.
	_, err = conn.Exec(ctxT(t), `EXECUTE claim(`+claimArgs+`)`)
	require.NoError(t, err)
	_, err = conn.Exec(ctxT(t), `EXECUTE settle('{}', '{}', '{}', '{}', '{}')`)
	require.NoError(t, err)

	exec(t, pg(db.Pool), `
		INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
		SELECT gen_random_uuid(), 'Thing', '{}', $1::bigint + g, $1::bigint, 0
		FROM generate_series(1, 100000) g`, now-time.Hour.Milliseconds())
	var ids string
	require.NoError(t, db.Pool.QueryRow(ctxT(t), `SELECT array_agg(id)::text FROM (SELECT id FROM outbox_events LIMIT 40) s`).Scan(&ids))

	plan := func(stmt, args string) string {
		rows, err := conn.Query(ctxT(t), `EXPLAIN EXECUTE `+stmt+`(`+args+`)`)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		p := strings.Join(lines, "\n")
		t.Logf("%s plan kept from the empty table:\n%s", stmt, p)
		return p
	}
	p := plan("claim", claimArgs)
	require.Contains(t, p, "Index Scan using outbox_events_pending_idx", p)
	require.NotContains(t, p, "Seq Scan", p)
	p = plan("settle", settleArgs("'"+ids+"'"))
	require.Contains(t, p, "outbox_events_pkey", p)
	require.NotContains(t, p, "Seq Scan", p)
	require.NotContains(t, p, "Hash Join", p)
}

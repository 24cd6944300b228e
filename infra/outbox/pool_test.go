package outbox_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
)

// TestRelayConnections proves that the relay runs on connections of its own:
// with asynchronous commits and generic plans, while the pool it was given
// (the API's) keeps synchronous commits and the server's planning, and
// delivering while every connection of that pool is held.
func TestRelayConnections(t *testing.T) {
	t.Parallel()

	t.Run("the relay's connections commit asynchronously and force generic plans, the API's do not", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		r := newRelay(t, pg(db.Pool), testConfig())
		show := func(pool *pgxpool.Pool, setting string) string {
			var v string
			require.NoError(t, pool.QueryRow(ctxT(t), `SELECT current_setting($1)`, setting).Scan(&v))
			return v
		}
		require.Equal(t, "off", show(r.Pool(), "synchronous_commit"))
		require.Equal(t, "force_generic_plan", show(r.Pool(), "plan_cache_mode"))
		// The API's keep the server's own setting (on by default; off on the
		// throwaway cluster pgtest starts without TEST_DATABASE_URL): no
		// connection of theirs overrides it.
		var source string
		require.NoError(t, db.Pool.QueryRow(ctxT(t), `SELECT source FROM pg_settings WHERE name = 'synchronous_commit'`).Scan(&source))
		require.NotContains(t, []string{"client", "session"}, source, "the API's connections override synchronous_commit")
		require.NoError(t, r.Pool().QueryRow(ctxT(t), `SELECT source FROM pg_settings WHERE name = 'synchronous_commit'`).Scan(&source))
		require.Contains(t, []string{"client", "session"}, source, "the relay's connections set synchronous_commit themselves")
		require.Equal(t, "auto", show(db.Pool, "plan_cache_mode"))
		// The bounds of the pool it was given hold on the relay's too.
		require.Equal(t, show(db.Pool, "statement_timeout"), show(r.Pool(), "statement_timeout"))
		require.Equal(t, show(db.Pool, "default_transaction_isolation"), show(r.Pool(), "default_transaction_isolation"))
	})

	t.Run("the relay delivers while every connection of the API's pool is held", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		delivered := make(chan struct{}, 1)
		r := newRelay(t, pg(db.Pool), testConfig(), handle(func(context.Context, outbox.Message) error {
			select {
			case delivered <- struct{}{}:
			default:
			}
			return nil
		}))
		require.NoError(t, r.Start(ctxT(t)))

		held := make([]*pgxpool.Conn, db.Pool.Config().MaxConns)
		for i := range held {
			c, err := db.Pool.Acquire(ctxT(t))
			require.NoError(t, err)
			held[i] = c
			defer c.Release()
		}
		// The append commits on one of the held connections, as a request
		// would; every other request would now wait for a connection.
		tx, err := held[0].Begin(ctxT(t))
		require.NoError(t, err)
		id, err := outbox.Append(ctxT(t), outbox.NewPostgresStore(nil), postgres.TxOf(tx), thing{N: 1})
		require.NoError(t, err)
		require.NoError(t, tx.Commit(ctxT(t)))
		r.Nudge()

		select {
		case <-delivered:
		case <-time.After(10 * time.Second):
			t.Fatal("the relay delivered nothing while the API's pool was exhausted")
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			var processed bool
			require.NoError(t, held[0].QueryRow(ctxT(t), `SELECT processed_at IS NOT NULL FROM outbox_events WHERE id = $1`, id).Scan(&processed))
			if processed {
				break
			}
			require.True(t, time.Now().Before(deadline), "the row was delivered but not settled while the API's pool was exhausted")
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("the relay's claims and settles run on generic plans from the first", func(t *testing.T) {
		t.Parallel()
		db := newDB(t)
		cfg := testConfig()
		cfg.ClaimSize = 1
		r := newRelay(t, pg(db.Pool), cfg, handle(func(context.Context, outbox.Message) error { return nil }))
		appendEvents(t, pg(db.Pool), things(8)...)
		for range 8 {
			n, err := r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, 1, n)
		}
		conns := r.Pool().AcquireAllIdle(ctxT(t))
		defer func() {
			for _, c := range conns {
				c.Release()
			}
		}()
		plans := map[string][2]int{} // statement: generic, custom
		for _, c := range conns {
			rows, err := c.Query(ctxT(t), `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements`)
			require.NoError(t, err)
			stmts, err := pgx.CollectRows(rows, pgx.RowToStructByPos[struct {
				Statement       string
				Generic, Custom int
			}])
			require.NoError(t, err)
			for _, p := range stmts {
				kind := "other"
				switch {
				case strings.Contains(p.Statement, "FOR UPDATE SKIP LOCKED"):
					kind = "claim"
				case strings.Contains(p.Statement, "unnest("):
					kind = "settle"
				}
				sum := plans[kind]
				plans[kind] = [2]int{sum[0] + p.Generic, sum[1] + p.Custom}
			}
		}
		require.Equal(t, [2]int{8, 0}, plans["claim"], "generic and custom plans of the claim")
		require.Equal(t, 0, plans["settle"][1], "custom plans of the settle")
		require.Positive(t, plans["settle"][0], "generic plans of the settle")
	})
}

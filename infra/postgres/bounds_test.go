package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
)

func TestBounds(t *testing.T) {
	t.Parallel()

	setup := func(t *testing.T) (*pgtest.DB, context.Context) {
		t.Helper()
		db := pgtest.Empty(t)
		ctx := t.Context()
		// A server (here: a database) whose default is REPEATABLE READ.
		_, err := db.Pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{db.Name}.Sanitize()+
			` SET default_transaction_isolation = 'repeatable read'`)
		require.NoError(t, err)
		return db, ctx
	}
	show := func(t *testing.T, ctx context.Context, q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, name string) string {
		t.Helper()
		var v string
		require.NoError(t, q.QueryRow(ctx, `SELECT current_setting($1)`, name).Scan(&v))
		return v
	}

	t.Run("every connection is READ COMMITTED whatever the server's default, and carries the bounds", func(t *testing.T) {
		t.Parallel()
		db, ctx := setup(t)
		pool, err := postgres.OpenBounded(ctx, db.URL, sqldb.Bounds{StatementTimeout: 1500 * time.Millisecond, LockTimeout: 250 * time.Millisecond})
		require.NoError(t, err)
		defer pool.Close()

		require.Equal(t, "read committed", show(t, ctx, pool, "transaction_isolation"))
		require.Equal(t, "1500ms", show(t, ctx, pool, "statement_timeout"))
		require.Equal(t, "250ms", show(t, ctx, pool, "lock_timeout"))

		plain, err := postgres.Open(ctx, db.URL)
		require.NoError(t, err)
		defer plain.Close()
		require.Equal(t, "read committed", show(t, ctx, plain, "transaction_isolation"), "Open pins the level too")
	})

	t.Run("a transaction left idle on a bounded connection is ended by the server and frees its locks", func(t *testing.T) {
		t.Parallel()
		db, ctx := setup(t)
		_, err := db.Pool.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)`)
		require.NoError(t, err)
		pool, err := postgres.OpenBounded(ctx, db.URL, sqldb.Bounds{StatementTimeout: 1500 * time.Millisecond, LockTimeout: time.Minute})
		require.NoError(t, err)
		defer pool.Close()
		require.Equal(t, "1500ms", show(t, ctx, pool, "idle_in_transaction_session_timeout"))

		// A client cut off mid-transaction (a partition) sends nothing more: here
		// the transaction simply stays open holding its row lock.
		abandoned, err := pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = abandoned.Rollback(context.Background()) }()
		_, err = abandoned.Exec(ctx, `SELECT 1 FROM t WHERE id = 1 FOR UPDATE`)
		require.NoError(t, err)

		// Another client (unbounded, so only the server's timeout can free it)
		// gets the lock once the server ends the idle session.
		start := time.Now()
		waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err = db.Pool.Exec(waitCtx, `UPDATE t SET id = 2 WHERE id = 1`)
		require.NoError(t, err, "the lock was freed before the test's own deadline")
		require.Less(t, time.Since(start), 10*time.Second)
		_, err = abandoned.Exec(ctx, `SELECT 1`)
		require.Error(t, err, "the abandoned transaction was ended")
	})

	t.Run("the idle-in-transaction timeout is the statement timeout within 1s to 5s", func(t *testing.T) {
		t.Parallel()
		for statement, want := range map[time.Duration]time.Duration{
			100 * time.Millisecond: time.Second,
			3 * time.Second:        3 * time.Second,
			5 * time.Second:        5 * time.Second,
			time.Hour:              5 * time.Second,
		} {
			require.Equal(t, want, postgres.IdleInTransactionTimeout(statement), statement)
		}
	})

	t.Run("a lock wait over lock_timeout fails as unavailable instead of waiting for ever", func(t *testing.T) {
		t.Parallel()
		db, ctx := setup(t)
		_, err := db.Pool.Exec(ctx, `CREATE TABLE t (id int PRIMARY KEY); INSERT INTO t VALUES (1)`)
		require.NoError(t, err)
		holder, err := db.Pool.Begin(ctx)
		require.NoError(t, err)
		defer func() { _ = holder.Rollback(ctx) }()
		_, err = holder.Exec(ctx, `SELECT 1 FROM t WHERE id = 1 FOR UPDATE`)
		require.NoError(t, err)

		pool, err := postgres.OpenBounded(ctx, db.URL, sqldb.Bounds{StatementTimeout: time.Minute, LockTimeout: 200 * time.Millisecond})
		require.NoError(t, err)
		defer pool.Close()
		waitCtx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		_, err = pool.Exec(waitCtx, `UPDATE t SET id = 2 WHERE id = 1`)

		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "55P03", pgErr.Code, "lock_not_available, not the test's own deadline")
		require.True(t, postgres.Unavailable(err), "answered 503: retry later")
	})

	t.Run("a statement over statement_timeout fails as unavailable", func(t *testing.T) {
		t.Parallel()
		db, ctx := setup(t)
		pool, err := postgres.OpenBounded(ctx, db.URL, sqldb.Bounds{StatementTimeout: 200 * time.Millisecond})
		require.NoError(t, err)
		defer pool.Close()
		_, err = pool.Exec(ctx, `SELECT pg_sleep(10)`)

		var pgErr *pgconn.PgError
		require.ErrorAs(t, err, &pgErr)
		require.Equal(t, "57014", pgErr.Code)
		require.True(t, postgres.Unavailable(err))
	})
}

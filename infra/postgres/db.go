package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/sqldb"
)

// DB is a PostgreSQL database as the use cases see it (sqldb.DB): a pgx pool.
// Its transactions hand their statements a Tx.
type DB struct{ Pool *pgxpool.Pool }

var _ sqldb.Transactor[Tx] = (*DB)(nil)

// NewDB returns pool as a sqldb.DB.
func NewDB(pool *pgxpool.Pool) *DB { return &DB{Pool: pool} }

// Tx is the executor of one PostgreSQL transaction: the statements of the
// stores run through it, and only through it, so they run in that
// transaction. Its bounds are the pool's (statement_timeout and lock_timeout
// are session settings the pool sets, see OpenBounded), so a statement needs no context of
// its own. It cannot commit or roll back: DB.InTx does.
type Tx struct{ tx pgx.Tx }

// TxOf is the executor of a transaction begun outside DB.InTx (a benchmark's
// own pgx.BeginFunc).
func TxOf(tx pgx.Tx) Tx { return Tx{tx: tx} }

// Exec runs a statement in the transaction.
func (t Tx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.tx.Exec(ctx, sql, args...)
}

// Query runs a query in the transaction.
func (t Tx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.tx.Query(ctx, sql, args...)
}

// QueryRow runs a query of at most one row in the transaction.
func (t Tx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.tx.QueryRow(ctx, sql, args...)
}

// Dialect is sqldb.Postgres.
func (*DB) Dialect() sqldb.Dialect { return sqldb.Postgres }

// InTx runs fn in a transaction of the pool (READ COMMITTED, see Isolation),
// read-only when asked.
func (db *DB) InTx(ctx context.Context, opts sqldb.TxOptions, fn func(Tx) error) error {
	var o pgx.TxOptions
	if opts.ReadOnly {
		o.AccessMode = pgx.ReadOnly
	}
	return pgx.BeginTxFunc(ctx, db.Pool, o, func(tx pgx.Tx) error { return fn(Tx{tx: tx}) })
}

// Ping succeeds when the database answers.
func (db *DB) Ping(ctx context.Context) error { return db.Pool.Ping(ctx) }

// Unavailable is the package's Unavailable.
func (*DB) Unavailable(err error) bool { return Unavailable(err) }

// SQLSTATEs of the failures that ask for the whole transaction again.
const (
	sqlSerialize = "40001"
	sqlDeadlock  = "40P01"
)

// Contention reports a serialization failure or a deadlock.
func (*DB) Contention(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == sqlSerialize || pgErr.Code == sqlDeadlock)
}

// Close closes the pool.
func (db *DB) Close() error {
	db.Pool.Close()
	return nil
}

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
// Its stores unwrap the Tx it begins to the pgx.Tx beneath.
type DB struct{ Pool *pgxpool.Pool }

var _ sqldb.DB = (*DB)(nil)

// NewDB returns pool as a sqldb.DB.
func NewDB(pool *pgxpool.Pool) *DB { return &DB{Pool: pool} }

// Tx is a transaction begun by DB.
type Tx struct{ pgx.Tx }

// Dialect is sqldb.Postgres.
func (Tx) Dialect() sqldb.Dialect { return sqldb.Postgres }

// Unwrap returns the pgx.Tx of a Tx this package began; it panics on another
// dialect's (a wiring defect).
func Unwrap(tx sqldb.Tx) pgx.Tx {
	t, ok := tx.(Tx)
	if !ok {
		panic(sqldb.WrongDialect(sqldb.Postgres, tx))
	}
	return t.Tx
}

// Dialect is sqldb.Postgres.
func (*DB) Dialect() sqldb.Dialect { return sqldb.Postgres }

// InTx runs fn in a transaction of the pool (READ COMMITTED, see Isolation),
// read-only when asked.
func (db *DB) InTx(ctx context.Context, opts sqldb.TxOptions, fn func(sqldb.Tx) error) error {
	var o pgx.TxOptions
	if opts.ReadOnly {
		o.AccessMode = pgx.ReadOnly
	}
	return pgx.BeginTxFunc(ctx, db.Pool, o, func(tx pgx.Tx) error { return fn(Tx{tx}) })
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

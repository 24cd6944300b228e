package inbox

import (
	"context"
	"database/sql"
	"time"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// EffectFunc is a consumer's effect as one Go function, the same on both
// dialects: the inbox calls it in the transaction that inserted the
// receipts, after it inserted them, with fresh, the events whose receipt is
// new there (in event id order, never empty), and now, the receipts'
// created_at. An error rolls the receipts back with whatever tx wrote, so
// the delivery fails and is retried; nothing it writes through tx can commit
// without its receipts, nor they without it. It must not keep tx after it
// returns, nor write outside tx (a write elsewhere would not roll back).
type EffectFunc[V any] func(ctx context.Context, tx Tx, fresh []Event[V], now time.Time) error

// Tx is the transaction an EffectFunc writes in, on either dialect. Its SQL
// uses $1, $2, … placeholders on both (SQLite's driver reads $N as the Nth
// argument, as PostgreSQL does); a uuid.UUID
// argument is a uuid on PostgreSQL and its text on SQLite. A consumer whose
// SQL cannot be the same on both gives Effect.SQLite (and Effect.Postgres)
// instead.
type Tx interface {
	// Exec runs a statement and returns how many rows it changed.
	Exec(ctx context.Context, sql string, args ...any) (int64, error)
	// Query runs a query; the caller closes its Rows.
	Query(ctx context.Context, sql string, args ...any) (Rows, error)
	// QueryRow runs a query of at most one row; its Scan returns an error
	// that errors.Is ErrNoRows when there is none, on both dialects.
	QueryRow(ctx context.Context, sql string, args ...any) Row
}

// Rows are a query's rows, read as database/sql's are.
type Rows interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
	Close()
}

// Row is a QueryRow's row.
type Row interface {
	Scan(dest ...any) error
}

// ErrNoRows is what Row.Scan's error is (errors.Is) when the query returned
// no row, on both dialects.
var ErrNoRows = sql.ErrNoRows

// pgTx is Tx on a PostgreSQL transaction.
type pgTx struct{ tx postgres.Tx }

func (t pgTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	tag, err := t.tx.Exec(ctx, sql, args...)
	return tag.RowsAffected(), err
}

func (t pgTx) Query(ctx context.Context, sql string, args ...any) (Rows, error) {
	rows, err := t.tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// QueryRow's no-row error is pgx.ErrNoRows, which is also ErrNoRows
// (errors.Is: pgx wraps database/sql's).
func (t pgTx) QueryRow(ctx context.Context, sql string, args ...any) Row {
	return t.tx.QueryRow(ctx, sql, args...)
}

// sqliteTx is Tx on a SQLite transaction.
type sqliteTx struct{ tx sqlite.Tx }

func (t sqliteTx) Exec(ctx context.Context, sql string, args ...any) (int64, error) {
	res, err := t.tx.Exec(ctx, sql, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

func (t sqliteTx) Query(ctx context.Context, sql string, args ...any) (Rows, error) {
	rows, err := t.tx.Query(ctx, sql, args...)
	if err != nil {
		return nil, err
	}
	return sqlRows{rows}, nil
}

func (t sqliteTx) QueryRow(ctx context.Context, sql string, args ...any) Row {
	return t.tx.QueryRow(ctx, sql, args...)
}

// sqlRows is database/sql's rows with Close's error dropped: Err reports
// what went wrong while reading.
type sqlRows struct{ *sql.Rows }

func (r sqlRows) Close() { _ = r.Rows.Close() }

// sqliteFunc is fn as the SQLite apply calls an effect.
func sqliteFunc[V any](fn EffectFunc[V]) func(context.Context, sqlite.Tx, []Event[V], int64) error {
	return func(ctx context.Context, tx sqlite.Tx, fresh []Event[V], now int64) error {
		return fn(ctx, sqliteTx{tx}, fresh, time.UnixMilli(now))
	}
}

// Read runs fn in a read-only transaction of db, on either dialect: a
// consumer's reads of its own tables, in the same SQL as its EffectFunc.
func Read(ctx context.Context, db sqldb.DB, fn func(tx Tx) error) error {
	return database.Pick(db, database.Dialects[error]{
		Postgres: func(d *postgres.DB) error {
			return d.InTx(ctx, sqldb.TxOptions{ReadOnly: true}, func(tx postgres.Tx) error { return fn(pgTx{tx}) })
		},
		SQLite: func(d *sqlite.DB) error {
			return d.InTx(ctx, sqldb.TxOptions{ReadOnly: true}, func(tx sqlite.Tx) error { return fn(sqliteTx{tx}) })
		},
	})
}

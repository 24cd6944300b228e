// Package sqldb is the transaction port between the use cases and the two SQL
// dialects (PostgreSQL through pgx, SQLite through modernc.org/sqlite). Nothing
// here names a driver: each dialect's package (infra/postgres, infra/sqlite)
// implements Transactor with its own executor type TX, and infra/database picks
// the dialect once, from the opened DB.
//
// The shape is River's riverdriver: a transaction is handed to its statements
// as the dialect's executor (a TX), never as an opaque handle a store would
// have to unwrap. So a store of one dialect cannot be given another dialect's
// transaction (it does not compile), and a statement cannot forget its
// transaction's deadline (the executor applies it).
package sqldb

import (
	"context"
	"fmt"
	"strings"
)

// Dialect names a SQL dialect.
type Dialect string

// The dialects.
const (
	Postgres Dialect = "postgres"
	SQLite   Dialect = "sqlite"
)

// TxOptions are what a use case asks of its transaction.
type TxOptions struct {
	// ReadOnly transactions write nothing; on SQLite they run on the read
	// connections, beside the one writer.
	ReadOnly bool
}

// DB is one service's database as everything above the stores sees it,
// whatever its dialect: it runs no statement of its own. Its transactions are
// its Transactor's, reached through the stores infra/database picked for it.
type DB interface {
	// Dialect is the database's dialect (for display: the stores are picked
	// by infra/database, never by comparing dialects).
	Dialect() Dialect
	// Ping succeeds when the database can be read and written (/readyz).
	Ping(ctx context.Context) error
	// Unavailable reports whether err means the database could not serve the
	// request now (down, unreachable, busy past its bounds) as opposed to a
	// statement it refused: callers answer 503 so that a sender retries.
	Unavailable(err error) bool
	// Contention reports whether err is the database asking for the whole
	// transaction again (a serialization failure or a deadlock).
	Contention(err error) bool
}

// Transactor is a database of one dialect whose transactions hand their
// statements TX, that dialect's executor (postgres.Tx, sqlite.Tx).
type Transactor[TX any] interface {
	DB
	// InTx runs fn in a transaction: committed when fn returns nil, rolled back
	// otherwise (fn's error is returned as it is). tx runs its statements in the
	// transaction, bounded by the transaction's deadline (DB_STATEMENT_TIMEOUT
	// on SQLite, the server's statement_timeout on PostgreSQL) whatever context
	// they are given. A write transaction holds the write lock from its start
	// on SQLite (BEGIN IMMEDIATE).
	InTx(ctx context.Context, opts TxOptions, fn func(tx TX) error) error
}

// Scheme is the DATABASE_URL prefix that selects SQLite.
const Scheme = "sqlite:"

// DialectOf is the dialect a DATABASE_URL selects: SQLite for sqlite:PATH,
// PostgreSQL for postgres:// and postgresql:// URLs (and key=value strings).
func DialectOf(url string) Dialect {
	if strings.HasPrefix(url, Scheme) {
		return SQLite
	}
	return Postgres
}

// SQLitePath is the one file a sqlite:PATH URL names. It fails on an empty
// path, on URI syntax (?, #, %: SQLite would read them as a query, a fragment
// or an escape, and a query could override the pragmas Open sets) and on an
// in-memory target (:memory:, file:...): each service's facts must outlive the
// process. The error names the variable and the path, in one line.
func SQLitePath(url string) (string, error) {
	path, ok := strings.CutPrefix(url, Scheme)
	if !ok {
		return "", fmt.Errorf("not a sqlite: URL")
	}
	path = strings.TrimPrefix(path, "//") // sqlite://PATH reads as sqlite:PATH
	switch {
	case path == "":
		return "", fmt.Errorf("sqlite: needs a file path (sqlite:data/labeling.db, sqlite:/var/lib/outboxpair/labeling.db)")
	case strings.ContainsAny(path, "?#%"):
		return "", fmt.Errorf("sqlite:%s: a file path only, without URI syntax (?, #, %%): the pragmas are the service's", path)
	case path == ":memory:" || strings.HasPrefix(path, "file:"):
		return "", fmt.Errorf("sqlite:%s: a file path only, not an in-memory database or a file: URI", path)
	}
	return path, nil
}

package labeling

import (
	"context"
	"errors"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// The use cases' transactions, in River's shape: the dialect is picked once
// (NewService, through database.Pick), and each transaction hands the use
// case a Store built on that transaction's executor, whose methods run their
// SQL there. So the use cases name no dialect, and a store cannot be built on
// a transaction of another dialect: the constructors take the dialect's Tx,
// checked when it compiles.

// dialects are the use cases' transactions per dialect; the outbox's append
// fans each event out to routes (none: billing's row alone).
func dialects(routes []outbox.Route) database.Dialects[runner] {
	fanout := outbox.WithRoutes(routes...)
	return database.Dialects[runner]{
		Postgres: func(db *postgres.DB) runner {
			events := outbox.NewPostgresStore(db.Pool, fanout)
			return transactions(db, func(tx postgres.Tx) Store { return NewPostgresStore(tx, events) })
		},
		SQLite: func(db *sqlite.DB) runner {
			events := outbox.NewSQLiteStore(db, fanout)
			return transactions(db, func(tx sqlite.Tx) Store { return NewSQLiteStore(tx, events) })
		},
	}
}

// runner runs fn in a transaction (sqldb.Transactor.InTx) with the Store
// built on it, and classifies what failed: a *fault.Error from fn passes
// through, an unreachable database is Unavailable (503, the client retries),
// anything else is Internal.
type runner func(ctx context.Context, opts sqldb.TxOptions, fn func(Store) error) error

// transactions is the runner of db, whose transactions get the Store that
// store builds: the only place the dialect's TX is named.
func transactions[TX any](db sqldb.Transactor[TX], store func(TX) Store) runner {
	return func(ctx context.Context, opts sqldb.TxOptions, fn func(Store) error) error {
		err := db.InTx(ctx, opts, func(tx TX) error { return fn(store(tx)) })
		var fe *fault.Error
		switch {
		case err == nil:
			return nil
		case errors.As(err, &fe):
			return err
		case db.Unavailable(err):
			return fault.Wrap(fault.Unavailable, err, "database unavailable")
		default:
			return fault.Wrap(fault.Internal, err, "internal error")
		}
	}
}

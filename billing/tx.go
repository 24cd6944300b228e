package billing

import (
	"context"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// The use cases' transactions, in River's shape: each dialect's stores are
// bound once (NewService, through database.Pick) to that dialect's executor,
// and a transaction hands the use case its statements already bound to it. So
// the use cases name no dialect, and a store cannot be handed a transaction of
// another dialect: the binding is generic in TX, checked when it compiles.

// dialect is the use cases' statements on one dialect, picked once.
type dialect struct {
	store Store
	run   runner
}

var dialects = database.Dialects[dialect]{
	Postgres: func(db *postgres.DB) dialect { return bindStore(db, NewPostgresStore(db.Pool)) },
	SQLite:   func(db *sqlite.DB) dialect { return bindStore(db, NewSQLiteStore(db)) },
}

// billingTx is the statements of one use case's transaction, bound to its
// executor: the use cases are written once, without naming a dialect or
// handling a transaction.
type billingTx interface {
	Apply(ctx context.Context, events []Event, now int64) (map[uuid.UUID]bool, error)
	ActiveRules(ctx context.Context, org uuid.UUID) (int64, error)
	InsertNATSFailed(ctx context.Context, f NATSFailed) error
	DeleteNATSFailed(ctx context.Context, id int64) error
	SetNATSFailedReason(ctx context.Context, id int64, reason string) error
}

// runner runs fn in a transaction (sqldb.Transactor.InTx) with its statements.
type runner func(ctx context.Context, opts sqldb.TxOptions, fn func(billingTx) error) error

// bindStore is the dialect of store: the only place its TX is named.
func bindStore[TX any](db sqldb.Transactor[TX], store DialectStore[TX]) dialect {
	return dialect{store: store, run: func(ctx context.Context, opts sqldb.TxOptions, fn func(billingTx) error) error {
		return db.InTx(ctx, opts, func(tx TX) error { return fn(txBound[TX]{tx: tx, store: store}) })
	}}
}

// txBound is billingTx on one transaction of the dialect TX.
type txBound[TX any] struct {
	tx    TX
	store TxStore[TX]
}

func (b txBound[TX]) Apply(ctx context.Context, events []Event, now int64) (map[uuid.UUID]bool, error) {
	return b.store.Apply(ctx, b.tx, events, now)
}

func (b txBound[TX]) ActiveRules(ctx context.Context, org uuid.UUID) (int64, error) {
	return b.store.ActiveRules(ctx, b.tx, org)
}

func (b txBound[TX]) InsertNATSFailed(ctx context.Context, f NATSFailed) error {
	return b.store.InsertNATSFailed(ctx, b.tx, f)
}

func (b txBound[TX]) DeleteNATSFailed(ctx context.Context, id int64) error {
	return b.store.DeleteNATSFailed(ctx, b.tx, id)
}

func (b txBound[TX]) SetNATSFailedReason(ctx context.Context, id int64, reason string) error {
	return b.store.SetNATSFailedReason(ctx, b.tx, id, reason)
}

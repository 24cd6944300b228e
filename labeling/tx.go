package labeling

import (
	"context"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// The use cases' transactions, in River's shape: each dialect's stores are
// bound once (NewService, through database.Pick) to that dialect's executor,
// and a transaction hands the use case its statements already bound to it. So
// the use cases name no dialect, and a store cannot be handed a transaction of
// another dialect: the binding is generic in TX, checked when it compiles.

// dialects are the use cases' statements per dialect; the outbox's append
// fans each event out to routes (none: billing's row alone).
func dialects(routes []outbox.Route) database.Dialects[runner] {
	fanout := outbox.WithRoutes(routes...)
	return database.Dialects[runner]{
		Postgres: func(db *postgres.DB) runner {
			return bind(db, NewPostgresStore(), outbox.NewPostgresStore(db.Pool, fanout))
		},
		SQLite: func(db *sqlite.DB) runner { return bind(db, NewSQLiteStore(), outbox.NewSQLiteStore(db, fanout)) },
	}
}

// rulesTx is the statements of one use case's transaction, bound to its
// executor: the rules store's and the outbox's append. Being bound, the use
// cases are written once, without naming a dialect or handling a transaction.
type rulesTx interface {
	Insert(ctx context.Context, r Rule) (Rule, bool, error)
	ByID(ctx context.Context, id RuleID) (Rule, bool, error)
	Get(ctx context.Context, org OrgID, id RuleID) (Rule, error)
	List(ctx context.Context, org OrgID, after uuid.UUID, limit int) ([]Rule, error)
	SetActive(ctx context.Context, org OrgID, id RuleID, active bool, now int64) (Rule, bool, error)
	Append(ctx context.Context, event outbox.Event) (uuid.UUID, error)
}

// runner runs fn in a transaction (sqldb.Transactor.InTx) with its statements.
type runner func(ctx context.Context, opts sqldb.TxOptions, fn func(rulesTx) error) error

// bind is the runner of one dialect: the only place its TX is named.
func bind[TX any](db sqldb.Transactor[TX], store Store[TX], events outbox.Appender[TX]) runner {
	return func(ctx context.Context, opts sqldb.TxOptions, fn func(rulesTx) error) error {
		return db.InTx(ctx, opts, func(tx TX) error { return fn(bound[TX]{tx: tx, store: store, events: events}) })
	}
}

// bound is rulesTx on one transaction of the dialect TX.
type bound[TX any] struct {
	tx     TX
	store  Store[TX]
	events outbox.Appender[TX]
}

func (b bound[TX]) Insert(ctx context.Context, r Rule) (Rule, bool, error) {
	return b.store.Insert(ctx, b.tx, r)
}

func (b bound[TX]) ByID(ctx context.Context, id RuleID) (Rule, bool, error) {
	return b.store.ByID(ctx, b.tx, id)
}

func (b bound[TX]) Get(ctx context.Context, org OrgID, id RuleID) (Rule, error) {
	return b.store.Get(ctx, b.tx, org, id)
}

func (b bound[TX]) List(ctx context.Context, org OrgID, after uuid.UUID, limit int) ([]Rule, error) {
	return b.store.List(ctx, b.tx, org, after, limit)
}

func (b bound[TX]) SetActive(ctx context.Context, org OrgID, id RuleID, active bool, now int64) (Rule, bool, error) {
	return b.store.SetActive(ctx, b.tx, org, id, active, now)
}

func (b bound[TX]) Append(ctx context.Context, event outbox.Event) (uuid.UUID, error) {
	return outbox.Append(ctx, b.events, b.tx, event)
}

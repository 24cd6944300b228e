package labeling

import (
	"context"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqlite"
)

// Store is labeling's statements in one transaction of one SQL dialect
// (store_postgres.go, store_sqlite.go): it is built on that transaction
// (NewPostgresStore, NewSQLiteStore), and each method runs its SQL on the
// transaction's executor itself. So the use case that opened the
// transaction decides what is atomic with what, and a store of one dialect
// cannot be built on the other's transaction (it does not compile). Both
// dialects pass one conformance table (store_test.go).
type Store interface {
	// Insert stores r unless a rule with its id exists, and reports whether it
	// did. Of several racing creates of one id exactly one inserts, and the
	// others see its committed row in their next statement.
	Insert(ctx context.Context, r Rule) (Rule, bool, error)
	// ByID returns the rule with id whatever its org; found is false when
	// there is none.
	ByID(ctx context.Context, id RuleID) (Rule, bool, error)
	// Get returns org's rule id, or a fault.NotFound when it does not exist or
	// belongs to another org.
	Get(ctx context.Context, org OrgID, id RuleID) (Rule, error)
	// List returns up to limit of org's rules with ids greater than after, in
	// id order (the nil UUID starts at the beginning).
	List(ctx context.Context, org OrgID, after uuid.UUID, limit int) ([]Rule, error)
	// SetActive moves org's rule id to the state active and reports whether it
	// moved: of concurrent calls exactly one changes it. updated_at never goes
	// back.
	SetActive(ctx context.Context, org OrgID, id RuleID, active bool, now int64) (Rule, bool, error)
	// Append appends event to the outbox in the store's transaction
	// (outbox.Append, River's InsertTx shape): its row exists if and only if
	// the transaction commits.
	Append(ctx context.Context, event outbox.Event) (uuid.UUID, error)
}

// NewPostgresStore returns the store on tx, a PostgreSQL transaction, whose
// Append inserts through events (the outbox store of tx's database).
func NewPostgresStore(tx postgres.Tx, events outbox.Appender[postgres.Tx]) Store {
	return pgStore{tx: tx, events: events}
}

// NewSQLiteStore returns the store on tx, a SQLite transaction, whose Append
// inserts through events (the outbox store of tx's database).
func NewSQLiteStore(tx sqlite.Tx, events outbox.Appender[sqlite.Tx]) Store {
	return sqliteStore{tx: tx, events: events}
}

const ruleColumns = `org_id, id, name, pattern, label, active, created_at, updated_at`

// ErrRuleNotFound is the answer for a rule that does not exist, or exists in
// another org, and for any request on an org the caller's token does not cover:
// one body for all, so that none of them tells which orgs or rules exist.
var ErrRuleNotFound error = fault.Errorf(fault.NotFound, "rule not found")

func errNotFound(RuleID) error { return ErrRuleNotFound }

package labeling

import (
	"context"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqlite"
)

// Store reads and writes labeling_rules on one SQL dialect (store_postgres.go,
// store_sqlite.go): TX is that dialect's executor (postgres.Tx, sqlite.Tx).
// Every method runs in the transaction its caller passes, so a use case
// decides what is atomic with what; a transaction of the other dialect does
// not compile. Both dialects pass one conformance table (store_test.go).
type Store[TX any] interface {
	// Insert stores r unless a rule with its id exists, and reports whether it
	// did. Of several racing creates of one id exactly one inserts, and the
	// others see its committed row in their next statement.
	Insert(ctx context.Context, tx TX, r Rule) (Rule, bool, error)
	// ByID returns the rule with id whatever its org; found is false when
	// there is none.
	ByID(ctx context.Context, tx TX, id RuleID) (Rule, bool, error)
	// Get returns org's rule id, or a fault.NotFound when it does not exist or
	// belongs to another org.
	Get(ctx context.Context, tx TX, org OrgID, id RuleID) (Rule, error)
	// List returns up to limit of org's rules with ids greater than after, in
	// id order (the nil UUID starts at the beginning).
	List(ctx context.Context, tx TX, org OrgID, after uuid.UUID, limit int) ([]Rule, error)
	// SetActive moves org's rule id to the state active and reports whether it
	// moved: of concurrent calls exactly one changes it. updated_at never goes
	// back.
	SetActive(ctx context.Context, tx TX, org OrgID, id RuleID, active bool, now int64) (Rule, bool, error)
}

// NewPostgresStore returns the rules store on PostgreSQL.
func NewPostgresStore() Store[postgres.Tx] { return pgStore{} }

// NewSQLiteStore returns the rules store on SQLite.
func NewSQLiteStore() Store[sqlite.Tx] { return sqliteStore{} }

const ruleColumns = `org_id, id, name, pattern, label, active, created_at, updated_at`

// ErrRuleNotFound is the answer for a rule that does not exist, or exists in
// another org, and for any request on an org the caller's token does not cover:
// one body for all, so that none of them tells which orgs or rules exist.
var ErrRuleNotFound error = fault.Errorf(fault.NotFound, "rule not found")

func errNotFound(RuleID) error { return ErrRuleNotFound }

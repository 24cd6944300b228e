package billing

import (
	"context"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// Store is billing's statements that run in a transaction of their own, on
// one SQL dialect (store_postgres.go, store_sqlite.go).
type Store interface {
	// ApplyOwn is TxStore.Apply in a transaction of its own (on PostgreSQL
	// one statement on the pool: one round trip, one commit).
	ApplyOwn(ctx context.Context, events []Event, now int64) (map[uuid.UUID]bool, error)
	// DeleteReceipts deletes at most limit receipts created before before
	// (epoch ms) and returns how many: the retention of billing_receipts.
	DeleteReceipts(ctx context.Context, before int64, limit int) (int64, error)
	// ListNATSFailed returns every terminated message, in the order recorded.
	ListNATSFailed(ctx context.Context) ([]NATSFailed, error)
	// NATSFailedSize is how many records there are and their payloads' bytes.
	NATSFailedSize(ctx context.Context) (rows, bytes int64, err error)
	// OldestNATSFailed returns up to limit records with an id above after, oldest first.
	OldestNATSFailed(ctx context.Context, after int64, limit int) ([]NATSFailed, error)
}

// TxStore is billing's statements that run in their caller's transaction, on
// one SQL dialect: TX is that dialect's executor (postgres.Tx, sqlite.Tx), so
// a transaction of the other dialect does not compile. The use case owns the
// transaction.
type TxStore[TX any] interface {
	// Apply applies events (distinct ids) atomically in tx: each event's
	// receipt is inserted unless it exists, and only the events whose receipt
	// is new add their delta to their org's active rules. It returns the ids
	// it applied. Every receipt commits with its change or none does.
	Apply(ctx context.Context, tx TX, events []Event, now int64) (map[uuid.UUID]bool, error)
	// ActiveRules returns org's active rules, 0 for an org no event touched.
	ActiveRules(ctx context.Context, tx TX, org uuid.UUID) (int64, error)
	// InsertNATSFailed records a terminated message once (keyed by stream_seq
	// and stored_at).
	InsertNATSFailed(ctx context.Context, tx TX, f NATSFailed) error
	// DeleteNATSFailed deletes the record id, if it is still there.
	DeleteNATSFailed(ctx context.Context, tx TX, id int64) error
	// SetNATSFailedReason replaces the reason of the record id, if it is still there.
	SetNATSFailedReason(ctx context.Context, tx TX, id int64, reason string) error
}

// DialectStore is the billing store of one dialect. Both dialects pass one
// conformance table (store_test.go).
type DialectStore[TX any] interface {
	Store
	TxStore[TX]
}

// stores are the billing stores per dialect.
var stores = database.Dialects[Store]{
	Postgres: func(db *postgres.DB) Store { return NewPostgresStore(db.Pool) },
	SQLite:   func(db *sqlite.DB) Store { return NewSQLiteStore(db) },
}

// NewStore returns the store of db's dialect (database.Pick): db must be the
// DB infra/database opened.
func NewStore(db sqldb.DB) Store { return database.Pick(db, stores) }

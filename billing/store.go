package billing

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// Store reads and writes billing_receipts, billing_quota and
// billing_nats_failed on one SQL dialect (store_postgres.go, store_sqlite.go).
// The use case owns the transaction; Apply may also run as its own.
type Store interface {
	// Apply applies events (distinct ids) atomically, in tx or, when tx is
	// nil, in a transaction of its own: each event's receipt is inserted unless
	// it exists, and only the events whose receipt is new add their delta to
	// their org's active rules. It returns the ids it applied. Every receipt
	// commits with its change or none does.
	Apply(ctx context.Context, tx sqldb.Tx, events []Event, now int64) (map[uuid.UUID]bool, error)
	// ActiveRules returns org's active rules, 0 for an org no event touched.
	ActiveRules(ctx context.Context, tx sqldb.Tx, org uuid.UUID) (int64, error)
	// DeleteReceipts deletes at most limit receipts created before before
	// (epoch ms) and returns how many: the retention of billing_receipts.
	DeleteReceipts(ctx context.Context, before int64, limit int) (int64, error)
	// InsertNATSFailed records a terminated message once (keyed by stream_seq
	// and stored_at).
	InsertNATSFailed(ctx context.Context, tx sqldb.Tx, f NATSFailed) error
	// ListNATSFailed returns every terminated message, in the order recorded.
	ListNATSFailed(ctx context.Context) ([]NATSFailed, error)
	// NATSFailedSize is how many records there are and their payloads' bytes.
	NATSFailedSize(ctx context.Context) (rows, bytes int64, err error)
	// OldestNATSFailed returns up to limit records with an id above after, oldest first.
	OldestNATSFailed(ctx context.Context, after int64, limit int) ([]NATSFailed, error)
	// DeleteNATSFailed deletes the record id, if it is still there.
	DeleteNATSFailed(ctx context.Context, tx sqldb.Tx, id int64) error
	// SetNATSFailedReason replaces the reason of the record id, if it is still there.
	SetNATSFailedReason(ctx context.Context, tx sqldb.Tx, id int64, reason string) error
}

// NewStore returns the billing store of db's dialect.
func NewStore(db sqldb.DB) Store {
	switch d := db.(type) {
	case *postgres.DB:
		return pgStore{pool: d.Pool}
	case *sqlite.DB:
		return sqliteStore{db: d}
	default:
		panic(fmt.Sprintf("billing: no store for %T", d))
	}
}

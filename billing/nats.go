package billing

import (
	"context"

	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
)

// Durable is the name of billing's consumer of the stream. Every billing replica
// pulls from this one consumer, so each message goes to one of them at a time.
const Durable = "billing"

// NATSConfig is what billing's intake of the stream needs (the inbox's:
// EVENTS_TOKEN, EVENTS_TOKEN_PREVIOUS, NATS_MAX_DELIVERIES and the bounds of
// billing_nats_failed, NATS_FAILED_MAX_ROWS and NATS_FAILED_MAX_BYTES).
type NATSConfig = inbox.NATSConfig

// ListNATSFailed returns every terminated message of billing_nats_failed in
// db, in the order recorded, payloads included: for tests and small tables.
// A listing pages (PageNATSFailed).
func ListNATSFailed(ctx context.Context, db sqldb.DB) ([]inbox.NATSFailed, error) {
	return inbox.NewStore(db, ReceiptsTable, NATSFailedTable).ListNATSFailed(ctx)
}

// PageNATSFailed returns up to limit records of billing_nats_failed in db
// with an id above after, in the order recorded, without their payload and
// signature (`billing nats failed`, the console's page): a keyset page, whose
// cost is the page's whatever the table holds.
func PageNATSFailed(ctx context.Context, db sqldb.DB, after int64, limit int) ([]inbox.NATSFailed, error) {
	return inbox.NewStore(db, ReceiptsTable, NATSFailedTable).PageNATSFailed(ctx, after, limit)
}

// NATSFailedSize is how many records billing_nats_failed holds in db and
// their payloads' bytes, read from billing_nats_failed_size (no scan).
func NATSFailedSize(ctx context.Context, db sqldb.DB) (rows, bytes int64, err error) {
	return inbox.NewStore(db, ReceiptsTable, NATSFailedTable).NATSFailedSize(ctx)
}

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

// The intake's bounds when set from the environment (the inbox's defaults):
// NATS_MAX_DELIVERIES, NATS_FAILED_MAX_ROWS and NATS_FAILED_MAX_BYTES, and
// the largest of each NATSConfig.Validate accepts.
const (
	DefaultNATSMaxDeliveries  = inbox.DefaultNATSMaxDeliveries
	MaxNATSMaxDeliveries      = inbox.MaxNATSMaxDeliveries
	DefaultNATSFailedMaxRows  = inbox.DefaultNATSFailedMaxRows
	MaxNATSFailedMaxRows      = inbox.MaxNATSFailedMaxRows
	DefaultNATSFailedMaxBytes = inbox.DefaultNATSFailedMaxBytes
	MaxNATSFailedMaxBytes     = inbox.MaxNATSFailedMaxBytes
)

// ListNATSFailed returns every terminated message of billing_nats_failed in
// db, in the order recorded (`billing nats failed`, the console).
func ListNATSFailed(ctx context.Context, db sqldb.DB) ([]inbox.NATSFailed, error) {
	return inbox.NewStore(db, ReceiptsTable, NATSFailedTable).ListNATSFailed(ctx)
}

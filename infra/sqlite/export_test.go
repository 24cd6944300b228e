package sqlite

import (
	"context"
	"github.com/acme/outboxpair/infra/sqldb"
	"time"
)

// OpenEvery is Open with the checkpoint loop's interval set, so a test need not
// wait 30 s.
func OpenEvery(ctx context.Context, dbURL string, b sqldb.Bounds, every time.Duration) (*DB, error) {
	return open(ctx, dbURL, b, every)
}

package sqlite

import (
	"context"
	"time"
)

// OpenEvery is Open with the checkpoint loop's interval set, so a test need not
// wait 30 s.
func OpenEvery(ctx context.Context, dbURL string, b Bounds, every time.Duration) (*DB, error) {
	return open(ctx, dbURL, b, every)
}

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/outbox"
)

// parseRequeue reads `labeling outbox requeue ID...` or `... --all-failed` (which
// stands alone).
func parseRequeue(args []string) (action, error) {
	if len(args) == 1 && args[0] == "--all-failed" {
		return withPool(requeueAllFailed), nil
	}
	ids, err := parseIDs("requeue", args)
	if err != nil {
		return nil, err
	}
	return withPool(func(ctx context.Context, pool *pgxpool.Pool, stdout io.Writer) error {
		n, err := outbox.Requeue(ctx, pool, ids)
		if err != nil {
			return err
		}
		// Ids that name no failed row are left alone; say how many that was.
		fmt.Fprintf(stdout, "requeued %d of %d rows\n", n, len(ids))
		return nil
	}), nil
}

// requeueAllFailed makes every failed row pending again.
func requeueAllFailed(ctx context.Context, pool *pgxpool.Pool, stdout io.Writer) error {
	n, err := outbox.RequeueAllFailed(ctx, pool)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "requeued %d rows\n", n)
	return nil
}

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/acme/outboxpair/infra/outbox"
)

// parseRequeue reads `labeling outbox requeue ID...` or `... --all-failed` (which
// stands alone).
func parseRequeue(args []string) (action, error) {
	if len(args) == 1 && args[0] == "--all-failed" {
		return withStore(requeueAllFailed), nil
	}
	ids, err := parseIDs("requeue", args)
	if err != nil {
		return nil, err
	}
	return withStore(func(ctx context.Context, store outbox.Store, stdout io.Writer) error {
		n, err := outbox.Requeue(ctx, store, ids)
		if err != nil {
			return err
		}
		// Ids that name no failed row are left alone; say how many that was.
		fmt.Fprintf(stdout, "requeued %d of %d rows\n", n, len(ids))
		return nil
	}), nil
}

// requeueAllFailed makes every failed row pending again.
func requeueAllFailed(ctx context.Context, store outbox.Store, stdout io.Writer) error {
	n, err := outbox.RequeueAllFailed(ctx, store)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "requeued %d rows\n", n)
	return nil
}

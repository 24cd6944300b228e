package main

import (
	"context"
	"fmt"
	"io"

	"github.com/acme/outboxpair/infra/outbox"
)

// parseDelete reads `labeling outbox delete ID...`. The rows must be failed or
// processed: outbox.Delete refuses a pending row and then deletes nothing.
func parseDelete(args []string) (action, error) {
	ids, err := parseIDs("delete", args)
	if err != nil {
		return nil, err
	}
	return withStore(func(ctx context.Context, store outbox.Store, stdout io.Writer) error {
		n, err := outbox.Delete(ctx, store, ids)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %d of %d rows\n", n, len(ids))
		return nil
	}), nil
}

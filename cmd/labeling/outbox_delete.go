package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/outbox"
)

// parseDelete reads `labeling outbox delete ID...`. The rows must be failed or
// processed: outbox.Delete refuses a pending row and then deletes nothing.
func parseDelete(args []string) (action, error) {
	ids, err := parseIDs("delete", args)
	if err != nil {
		return nil, err
	}
	return withPool(func(ctx context.Context, pool *pgxpool.Pool, stdout io.Writer) error {
		n, err := outbox.Delete(ctx, pool, ids)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %d of %d rows\n", n, len(ids))
		return nil
	}), nil
}

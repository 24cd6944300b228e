package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/acme/outboxpair/infra/cli"
	"github.com/acme/outboxpair/infra/outbox"
)

// parseRequeue reads `labeling outbox requeue ID...` or `... --all-failed`, which
// stands alone: a row id with it is a usage error, not a narrower requeue.
func parseRequeue(fs *flag.FlagSet) func(args []string) (cli.Action, error) {
	all := fs.Bool("all-failed", false, "make every failed row pending again, attempts reset to 0 (no ID with it)")
	byID := onIDs("requeue", "requeued", outbox.Requeue)
	return func(args []string) (cli.Action, error) {
		if !*all {
			return byID(args)
		}
		if len(args) > 0 {
			return nil, fmt.Errorf("outbox requeue --all-failed takes no row ids, got %q", args)
		}
		return withStore(requeueAllFailed), nil
	}
}

// requeueAllFailed makes every failed row pending again.
func requeueAllFailed(ctx context.Context, store outbox.Store, stdout, stderr io.Writer) error {
	n, err := outbox.RequeueAllFailed(ctx, store)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "requeued %d rows\n", n)
	return nil
}

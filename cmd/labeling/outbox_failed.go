package main

import (
	"context"
	"fmt"
	"io"

	"github.com/acme/outboxpair/infra/outbox"
)

// outboxFailed is `labeling outbox failed`: one dead-lettered row a line,
// tab-separated: id, event_tag, attempts, failed_at, last_error; none
// prints "no failed rows" on stderr.
func outboxFailed(ctx context.Context, store outbox.Store, stdout, stderr io.Writer) error {
	rows, err := outbox.Failed(ctx, store)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		// On stderr: stdout stays the (empty) listing a script reads.
		fmt.Fprintln(stderr, "no failed rows")
	}
	for _, r := range rows {
		fmt.Fprintf(stdout, "%s\t%s\t%d\t%s\t%s\n",
			r.ID, r.Tag, r.Attempts, formatMillis(r.FailedAt), escapeField(r.LastError))
	}
	return nil
}

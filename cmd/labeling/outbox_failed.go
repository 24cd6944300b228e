package main

import (
	"context"
	"io"
	"strconv"

	"github.com/acme/outboxpair/infra/cli"
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
	list := cli.NewListing(stdout, stderr, "no failed rows")
	defer list.Close()
	for _, r := range rows {
		list.Row(r.ID.String(), r.Tag, strconv.Itoa(r.Attempts), cli.Time(r.FailedAt), r.LastError)
	}
	return nil
}

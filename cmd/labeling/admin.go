package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/outbox"
)

// outboxCommand runs one of the dead-letter commands against pool.
func outboxCommand(ctx context.Context, cmd command, pool *pgxpool.Pool, stdout io.Writer) error {
	switch cmd.name {
	case "failed":
		rows, err := outbox.Failed(ctx, pool)
		if err != nil {
			return err
		}
		for _, r := range rows {
			fmt.Fprintf(stdout, "%s\t%s\t%d\t%s\t%s\n",
				r.ID, r.Tag, r.Attempts, formatMillis(r.FailedAt), escapeField(r.LastError))
		}
		return nil
	case "requeue":
		var n int64
		var err error
		if cmd.allFailed {
			n, err = outbox.RequeueAllFailed(ctx, pool)
		} else {
			n, err = outbox.Requeue(ctx, pool, cmd.ids)
		}
		if err != nil {
			return err
		}
		if cmd.allFailed {
			fmt.Fprintf(stdout, "requeued %d rows\n", n)
		} else {
			// Ids that name no failed row are left alone; say how many that was.
			fmt.Fprintf(stdout, "requeued %d of %d rows\n", n, len(cmd.ids))
		}
		return nil
	case "delete":
		n, err := outbox.Delete(ctx, pool, cmd.ids)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "deleted %d of %d rows\n", n, len(cmd.ids))
		return nil
	}
	return fmt.Errorf("unknown outbox command %q", cmd.name)
}

// escapeField keeps a row on one line and its columns apart, whatever the stored
// error text holds.
var escapeField = strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\r", `\r`).Replace

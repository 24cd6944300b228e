package main

import (
	"context"
	"io"
	"strconv"
	"time"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/cmd/billing/config"
	"github.com/acme/outboxpair/infra/cli"
	envvar "github.com/acme/outboxpair/infra/env"
)

// natsFailedTimeout bounds `billing nats failed`.
const natsFailedTimeout = 30 * time.Second

// natsFailedPage is how many records `billing nats failed` reads at a time.
const natsFailedPage = 1000

// natsFailed is `billing nats failed`: it prints billing_nats_failed as
// every listing is printed (cli.Listing: one record a line, tab-separated,
// each field escaped losslessly, so a subject or msg id that is not UTF-8
// prints its other bytes as \xNN): stream_seq, subject, msg_id, deliveries,
// failed_at, reason, after the database it opened on stderr
// (cli.OpenDatabase). It reads them a page at a time (keyset, by id), without
// their payloads, so its memory is a page's. DATABASE_URL only, like every operator command, and
// stopped by a signal like them; bounded at 30 s (contract section 1).
func natsFailed(lookup envvar.Lookup, stdout, stderr io.Writer) error {
	cfg, err := envvar.LoadCommand(lookup, config.DefaultDatabase)
	if err != nil {
		return err
	}
	return cli.Bounded(natsFailedTimeout, func(ctx context.Context) error {
		db, err := cli.OpenDatabase(ctx, cfg.DatabaseURL, cfg.Bounds, stderr)
		if err != nil {
			return err
		}
		defer db.Close()
		list := cli.NewListing(stdout, stderr, "no failed records")
		defer list.Close()
		var after int64
		for {
			rows, err := billing.PageNATSFailed(ctx, db, after, natsFailedPage)
			if err != nil {
				return err
			}
			for _, f := range rows {
				list.Row(strconv.FormatUint(f.StreamSeq, 10), f.Subject, f.MsgID,
					strconv.FormatUint(f.Deliveries, 10), cli.Time(f.FailedAt), f.Reason)
			}
			if len(rows) < natsFailedPage {
				return nil
			}
			after = rows[len(rows)-1].ID
		}
	})
}

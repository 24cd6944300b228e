package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/database"
)

// natsFailed is `billing nats failed`: it prints billing_nats_failed, one message
// a line, tab-separated: stream_seq, subject, msg_id, deliveries, failed_at
// (RFC 3339), reason. DATABASE_URL only, like every operator command.
func natsFailed(lookup config.Lookup, stdout, stderr io.Writer) error {
	cfg, err := config.LoadCommand(lookup, config.DefaultBillingDatabase)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := database.OpenExisting(ctx, cfg.DatabaseURL, database.Bounds{})
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer db.Close()
	rows, err := billing.ListNATSFailed(ctx, db)
	if err != nil {
		return err
	}
	if len(rows) == 0 {
		// On stderr: stdout stays the (empty) listing a script reads.
		fmt.Fprintln(stderr, "no failed records")
	}
	esc := strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`)
	for _, f := range rows {
		fmt.Fprintf(stdout, "%d\t%s\t%s\t%d\t%s\t%s\n", f.StreamSeq, esc.Replace(f.Subject), esc.Replace(f.MsgID),
			f.Deliveries, time.UnixMilli(f.FailedAt).UTC().Format(time.RFC3339Nano), esc.Replace(f.Reason))
	}
	return nil
}

package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/sqldb"
)

// natsFailed is `billing nats failed`: it prints billing_nats_failed, one message
// a line, tab-separated: stream_seq, subject, msg_id, deliveries, failed_at
// (RFC 3339), reason. DATABASE_URL only, like every operator command. Each text
// field is escaped losslessly (escape): a subject or msg id that is not UTF-8
// prints its other bytes as \xNN.
func natsFailed(lookup config.Lookup, stdout, stderr io.Writer) error {
	cfg, err := config.LoadCommand(lookup, config.DefaultBillingDatabase)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := database.OpenExisting(ctx, cfg.DatabaseURL, sqldb.Bounds{})
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
	for _, f := range rows {
		fmt.Fprintf(stdout, "%d\t%s\t%s\t%d\t%s\t%s\n", f.StreamSeq, escape(f.Subject), escape(f.MsgID),
			f.Deliveries, time.UnixMilli(f.FailedAt).UTC().Format(time.RFC3339Nano), escape(f.Reason))
	}
	return nil
}

// escape writes s on one line, losslessly: `\`, tab and newline as `\\`, `\t`,
// `\n`, a byte that is not part of valid UTF-8 as `\xNN` (lowercase hex, as
// Go's %q), every other rune as is.
func escape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

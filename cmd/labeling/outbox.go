package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/outbox"
)

// What the dead-letter commands (outbox_*.go) share: the outbox store they run
// on, the row ids they take, and how they print a row.

// withStore runs fn as an operator command with the outbox store of
// DATABASE_URL's database (either dialect).
func withStore(fn func(ctx context.Context, store outbox.Store, stdout io.Writer) error) action {
	return operator(func(ctx context.Context, cfg config.Command, stdout io.Writer) error {
		db, err := database.Open(ctx, cfg.DatabaseURL, dbBounds(cfg.Bounds))
		if err != nil {
			return fmt.Errorf("DATABASE_URL: %w", err)
		}
		defer db.Close()
		return fn(ctx, outbox.NewStore(db), stdout)
	})
}

// parseIDs reads the row ids of `outbox NAME ID...`: at least one, each a UUID in
// its 36-character form.
func parseIDs(name string, args []string) ([]uuid.UUID, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("outbox %s needs at least one row id", name)
	}
	ids := make([]uuid.UUID, 0, len(args))
	for _, s := range args {
		id, err := uuid.Parse(s)
		if err != nil || len(s) != 36 {
			// Also catches --all-failed mixed with ids, and any other flag.
			return nil, fmt.Errorf("outbox %s: %q is not a row id (a UUID)", name, s)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// timeLayout matches the API's: RFC 3339 UTC with milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func formatMillis(ms int64) string { return time.UnixMilli(ms).UTC().Format(timeLayout) }

// escapeField keeps a row on one line and its columns apart, whatever the stored
// error text holds.
var escapeField = strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`, "\r", `\r`).Replace

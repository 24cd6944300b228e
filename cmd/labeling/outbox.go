package main

import (
	"context"
	"fmt"
	"io"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/cli"
	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/wire"
)

// What the dead-letter commands (outbox_*.go) share: the outbox store they run
// on, the row ids they take, and how they print a row.

// withStore runs fn as an operator command with the outbox store of
// DATABASE_URL's database (either dialect).
func withStore(fn func(ctx context.Context, store outbox.Store, stdout, stderr io.Writer) error) cli.Action {
	return operator(func(ctx context.Context, cfg config.Command, stdout, stderr io.Writer) error {
		db, err := database.OpenExisting(ctx, cfg.DatabaseURL, cfg.Bounds)
		if err != nil {
			return fmt.Errorf("DATABASE_URL: %w", err)
		}
		defer db.Close()
		return fn(ctx, outbox.NewStore(db), stdout, stderr)
	})
}

// onIDs is the parser of `outbox NAME ID...`: its action runs op on those rows
// and prints "DONE n of m rows", m the ids given, n the rows op changed (an id
// that names no row op may change is left alone, and the count says so).
func onIDs(name, done string, op func(context.Context, outbox.Store, []uuid.UUID) (int64, error)) func(args []string) (cli.Action, error) {
	return func(args []string) (cli.Action, error) {
		ids, err := parseIDs(name, args)
		if err != nil {
			return nil, err
		}
		return withStore(func(ctx context.Context, store outbox.Store, stdout, stderr io.Writer) error {
			n, err := op(ctx, store, ids)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s %d of %d rows\n", done, n, len(ids))
			return nil
		}), nil
	}
}

// parseIDs reads the row ids of `outbox NAME ID...`: at least one, each a UUID in
// its 36-character form.
func parseIDs(name string, args []string) ([]uuid.UUID, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("outbox %s needs at least one row id", name)
	}
	ids := make([]uuid.UUID, 0, len(args))
	for _, s := range args {
		id, err := wire.ParseUUID(s)
		if err != nil {
			// Also catches a flag after an id, where flag parsing stopped.
			return nil, fmt.Errorf("outbox %s: %q is not a row id (a UUID)", name, s)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

package main

import (
	"context"
	"io"

	"github.com/acme/outboxpair/infra/cli"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/outbox"
)

// withStore runs fn as an operator command with the outbox store of
// DATABASE_URL's database (either dialect; named on stderr first,
// cli.OpenDatabase), on labeling's outbox_events: the
// store of the shared `outbox …` commands (cli.OutboxCommands).
func withStore(fn func(ctx context.Context, store outbox.Store, stdout, stderr io.Writer) error) cli.Action {
	return operator(func(ctx context.Context, cfg envvar.Command, stdout, stderr io.Writer) error {
		db, err := cli.OpenDatabase(ctx, cfg.DatabaseURL, cfg.Bounds, stderr)
		if err != nil {
			return err
		}
		defer db.Close()
		return fn(ctx, outbox.NewStore(db), stdout, stderr)
	})
}

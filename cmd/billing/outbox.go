package main

import (
	"context"
	"io"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/cmd/billing/config"
	"github.com/acme/outboxpair/infra/cli"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/outbox"
)

// withOutboxStore runs fn as an operator command with the outbox store of
// DATABASE_URL's database (either dialect; named on stderr first,
// cli.OpenDatabase) on billing_outbox_events: the store
// of the shared `outbox …` commands (cli.OutboxCommands), which behave as
// labeling's do (contract sections 1 and 10). It reads DATABASE_URL and the
// DB_* bounds only, runs within commandTimeout and stops on SIGINT or
// SIGTERM, as labeling's operator commands do.
func withOutboxStore(fn func(ctx context.Context, store outbox.Store, stdout, stderr io.Writer) error) cli.Action {
	return func(lookup envvar.Lookup, stdout, stderr io.Writer) error {
		cfg, err := envvar.LoadCommand(lookup, config.DefaultDatabase)
		if err != nil {
			return err
		}
		return cli.Bounded(commandTimeout, func(ctx context.Context) error {
			db, err := cli.OpenDatabase(ctx, cfg.DatabaseURL, cfg.Bounds, stderr)
			if err != nil {
				return err
			}
			defer db.Close()
			return fn(ctx, outbox.NewStore(db, outbox.WithTable(billing.OutboxTable)), stdout, stderr)
		})
	}
}

package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/acme/outboxpair/cmd/billing/config"
	"github.com/acme/outboxpair/infra/cli"
	"github.com/acme/outboxpair/infra/database"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/migrations"
)

// migrate is `billing migrate`: it applies the pending migrations and exits. It
// reads DATABASE_URL only, is bounded like labeling's by commandTimeout, and is
// stopped by a signal.
func migrate(lookup envvar.Lookup, stdout, stderr io.Writer) error {
	cfg, err := envvar.LoadCommand(lookup, config.DefaultDatabase)
	if err != nil {
		return err
	}
	// Logged like serve's migrations, to this command's stdout.
	logger := slog.New(slog.NewJSONHandler(stdout, nil)).With("service", "billing")
	if cfg.DatabaseDefaulted {
		service.LogDefaultDatabase(logger, cfg.DatabaseURL)
	}
	return cli.Bounded(commandTimeout, func(ctx context.Context) error {
		return database.MigrateURL(ctx, cfg.DatabaseURL, migrations.Billing, logger)
	})
}

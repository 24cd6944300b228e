package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/migrations"
)

// migrate is `billing migrate`: it applies the pending migrations and exits. It
// reads DATABASE_URL only, is bounded like labeling's by commandTimeout, and is
// stopped by a signal.
func migrate(lookup config.Lookup, stdout, stderr io.Writer) error {
	cfg, err := config.LoadCommand(lookup, config.DefaultBillingDatabase)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, commandTimeout)
	defer cancel()
	logger := slog.New(slog.NewJSONHandler(stdout, nil)).With("service", "billing")
	logDefaultDatabase(logger, cfg.DatabaseDefaulted, cfg.DatabaseURL)
	return database.MigrateURL(ctx, cfg.DatabaseURL, migrations.Billing, logger)
}

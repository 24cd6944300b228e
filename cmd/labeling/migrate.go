package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/acme/outboxpair/infra/database"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/migrations"
)

// migrate is `labeling migrate`: it applies the pending migrations and exits.
func migrate(ctx context.Context, cfg envvar.Command, stdout, stderr io.Writer) error {
	// Logged like serve's migrations, to this command's stdout.
	logger := slog.New(slog.NewJSONHandler(stdout, nil)).With("service", "labeling")
	if cfg.DatabaseDefaulted {
		service.LogDefaultDatabase(logger, cfg.DatabaseURL)
	}
	return database.MigrateURL(ctx, cfg.DatabaseURL, migrations.Labeling, logger)
}

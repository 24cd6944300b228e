package main

import (
	"context"
	"io"

	"github.com/acme/outboxpair/cmd/labeling/config"
	"github.com/acme/outboxpair/infra/cli"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/service"
)

// Exit codes, named here for this package's tests.
const (
	exitOK    = cli.ExitOK
	exitFail  = cli.ExitFail
	exitUsage = cli.ExitUsage
)

// commandTimeout bounds every command but serve: migrate may wait for a replica
// holding the migration lock, the outbox commands are single statements.
const commandTimeout = service.StartTimeout

// program is the command table, one row a command; each lives in its own file.
// The usage text is generated from it.
var program = cli.Program{
	Name:    "labeling",
	Default: "serve",
	Commands: append([]cli.Command{
		{Name: "serve", Summary: "apply migrations, then serve HTTP and relay the outbox until SIGINT/SIGTERM", Run: serve},
		{Name: "migrate", Summary: "apply pending migrations and exit", Run: operator(migrate)},
		{Name: "healthcheck", Summary: "exit 0 when the server on HTTP_ADDR answers /readyz with 200", Run: service.HealthcheckCommand(config.DefaultAddr)},
	}, cli.OutboxCommands(withStore, "billing")...),
	Environment: envvar.LabelingService.Usage(),
}

// run is the whole program, so tests can drive it without a process.
func run(args []string, lookup envvar.Lookup, stdout, stderr io.Writer) int {
	return program.Run(args, lookup, stdout, stderr)
}

// operator runs an operator command: it reads DATABASE_URL and the DB_* bounds
// only (never EVENTS_TOKEN: such a command never delivers) and runs within
// commandTimeout, stopped early by SIGINT or SIGTERM.
func operator(fn func(ctx context.Context, cfg envvar.Command, stdout, stderr io.Writer) error) cli.Action {
	return func(lookup envvar.Lookup, stdout, stderr io.Writer) error {
		cfg, err := envvar.LoadCommand(lookup, config.DefaultDatabase)
		if err != nil {
			return err
		}
		return cli.Bounded(commandTimeout, func(ctx context.Context) error { return fn(ctx, cfg, stdout, stderr) })
	}
}

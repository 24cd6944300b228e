package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/migrations"
)

// Exit codes: a usage error is 2, so scripts can tell it from a failed run.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// commandTimeout bounds every command but serve: migrate may wait for a replica
// holding the migration lock, the outbox commands are single statements.
const commandTimeout = service.StartTimeout

const usage = `usage: labeling [command]

commands:
  serve                        apply migrations, then serve HTTP and relay the outbox
                               until SIGINT/SIGTERM (the default)
  migrate                      apply pending migrations and exit
  healthcheck                  exit 0 when this host's server answers /readyz with 200
  outbox failed                print dead-lettered rows, one a line, tab-separated:
                               id, event_tag, attempts, failed_at, last_error
  outbox requeue ID...         make these failed rows pending again, attempts reset to 0
  outbox requeue --all-failed  the same for every failed row
  outbox delete ID...          delete these rows; refused if any is pending

configuration (environment): %s
`

// command is a parsed command line.
type command struct {
	name      string      // serve, migrate, healthcheck, failed, requeue, delete
	ids       []uuid.UUID // requeue and delete
	allFailed bool        // requeue --all-failed
}

// run is the whole program, so tests can drive it without a process.
func run(args []string, lookup config.Lookup, stdout, stderr io.Writer) int {
	cmd, err := parseArgs(args)
	if errors.Is(err, errHelp) {
		fmt.Fprintf(stdout, usage, strings.Join(config.LabelingVars, ", "))
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "labeling: %v\n\n", err)
		fmt.Fprintf(stderr, usage, strings.Join(config.LabelingVars, ", "))
		return exitUsage
	}
	switch cmd.name {
	case "serve":
		var cfg config.Labeling
		var authCfg config.Auth
		if cfg, err = config.LoadLabeling(lookup); err == nil {
			// Only serve reads AUTH_*: the operator commands never need them.
			if authCfg, err = config.LoadAuth(lookup); err == nil {
				err = service.Run(serveOptions(cfg, auth.SettingsFrom(authCfg), service.Logger("labeling")))
			}
		}
	case "healthcheck":
		// Reads HTTP_ADDR only: a health check needs no secret and no database.
		err = service.Healthcheck(config.LoadHTTPAddr(lookup, ":8080"))
	default:
		// The operator commands never deliver: they need DATABASE_URL, not
		// EVENTS_TOKEN.
		var cfg config.Command
		if cfg, err = config.LoadCommand(lookup); err == nil {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, commandTimeout)
			defer cancel()
			err = runCommand(ctx, cmd, cfg, stdout)
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "labeling: %v\n", oneLine(err))
		return exitFail
	}
	return exitOK
}

var errHelp = errors.New("help")

func parseArgs(args []string) (command, error) {
	if len(args) == 0 {
		return command{name: "serve"}, nil
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		return command{}, errHelp
	case "serve", "migrate", "healthcheck":
		if len(args) > 1 {
			return command{}, fmt.Errorf("%s takes no arguments, got %q", args[0], args[1:])
		}
		return command{name: args[0]}, nil
	case "outbox":
		return parseOutbox(args[1:])
	}
	return command{}, fmt.Errorf("unknown command %q", args[0])
}

func parseOutbox(args []string) (command, error) {
	if len(args) == 0 {
		return command{}, errors.New("outbox needs a subcommand: failed, requeue or delete")
	}
	cmd := command{name: args[0]}
	rest := args[1:]
	switch cmd.name {
	case "failed":
		if len(rest) > 0 {
			return command{}, fmt.Errorf("outbox failed takes no arguments, got %q", rest)
		}
		return cmd, nil
	case "requeue":
		if len(rest) == 1 && rest[0] == "--all-failed" {
			cmd.allFailed = true
			return cmd, nil
		}
	case "delete":
	default:
		return command{}, fmt.Errorf("unknown outbox subcommand %q", cmd.name)
	}
	if len(rest) == 0 {
		return command{}, fmt.Errorf("outbox %s needs at least one row id", cmd.name)
	}
	for _, s := range rest {
		id, err := uuid.Parse(s)
		if err != nil || len(s) != 36 {
			// Also catches --all-failed mixed with ids, and any other flag.
			return command{}, fmt.Errorf("outbox %s: %q is not a row id (a UUID)", cmd.name, s)
		}
		cmd.ids = append(cmd.ids, id)
	}
	return cmd, nil
}

func runCommand(ctx context.Context, cmd command, cfg config.Command, stdout io.Writer) error {
	switch cmd.name {
	case "migrate":
		// Logged like serve's migrations, to this command's stdout.
		logger := slog.New(slog.NewJSONHandler(stdout, nil)).With("service", "labeling")
		return postgres.MigrateURL(ctx, cfg.DatabaseURL, migrations.Labeling, logger)
	}
	pool, err := postgres.OpenBounded(ctx, cfg.DatabaseURL, dbBounds(cfg.Bounds))
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	return outboxCommand(ctx, cmd, pool, stdout)
}

// oneLine keeps the error message on one line, as the contract asks of start-up
// failures and as log collectors expect of stderr.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// timeLayout matches the API's: RFC 3339 UTC with milliseconds.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

func formatMillis(ms int64) string { return time.UnixMilli(ms).UTC().Format(timeLayout) }

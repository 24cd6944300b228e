package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/service"
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

// action is a command with its arguments checked: it reads the configuration it
// needs through lookup and writes its output to stdout.
type action func(lookup config.Lookup, stdout io.Writer) error

// parser checks a command's arguments (those after its name); an error is a
// usage error.
type parser func(args []string) (action, error)

// commands is the dispatch table, one entry a command; each lives in its own file.
var commands = map[string]parser{
	"serve":       noArgs("serve", serve),
	"migrate":     noArgs("migrate", operator(migrate)),
	"healthcheck": noArgs("healthcheck", healthcheck),
	"outbox":      group("outbox", "failed, requeue or delete", outboxCommands),
}

// outboxCommands are the dead-letter commands, `labeling outbox NAME`.
var outboxCommands = map[string]parser{
	"failed":  noArgs("outbox failed", withStore(outboxFailed)),
	"requeue": parseRequeue,
	"delete":  parseDelete,
}

// run is the whole program, so tests can drive it without a process.
func run(args []string, lookup config.Lookup, stdout, stderr io.Writer) int {
	act, err := parseArgs(args)
	if errors.Is(err, errHelp) {
		fmt.Fprintf(stdout, usage, strings.Join(config.LabelingVars, ", "))
		return exitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "labeling: %v\n\n", err)
		fmt.Fprintf(stderr, usage, strings.Join(config.LabelingVars, ", "))
		return exitUsage
	}
	if err := act(lookup, stdout); err != nil {
		fmt.Fprintf(stderr, "labeling: %v\n", oneLine(err))
		return exitFail
	}
	return exitOK
}

var errHelp = errors.New("help")

func parseArgs(args []string) (action, error) {
	if len(args) == 0 {
		return serve, nil
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		return nil, errHelp
	}
	parse, ok := commands[args[0]]
	if !ok {
		return nil, fmt.Errorf("unknown command %q", args[0])
	}
	return parse(args[1:])
}

// noArgs is the parser of a command that takes no arguments.
func noArgs(name string, act action) parser {
	return func(args []string) (action, error) {
		if len(args) > 0 {
			return nil, fmt.Errorf("%s takes no arguments, got %q", name, args)
		}
		return act, nil
	}
}

// group is the parser of a command with subcommands, such as `outbox failed`.
func group(name, list string, subcommands map[string]parser) parser {
	return func(args []string) (action, error) {
		if len(args) == 0 {
			return nil, fmt.Errorf("%s needs a subcommand: %s", name, list)
		}
		parse, ok := subcommands[args[0]]
		if !ok {
			return nil, fmt.Errorf("unknown %s subcommand %q", name, args[0])
		}
		return parse(args[1:])
	}
}

// operator runs an operator command: it reads DATABASE_URL and the DB_* bounds
// only (never EVENTS_TOKEN: such a command never delivers) and runs within
// commandTimeout, stopped early by SIGINT or SIGTERM.
func operator(fn func(ctx context.Context, cfg config.Command, stdout io.Writer) error) action {
	return func(lookup config.Lookup, stdout io.Writer) error {
		cfg, err := config.LoadCommand(lookup, config.DefaultLabelingDatabase)
		if err != nil {
			return err
		}
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		defer stop()
		ctx, cancel := context.WithTimeout(ctx, commandTimeout)
		defer cancel()
		return fn(ctx, cfg, stdout)
	}
}

// oneLine keeps the error message on one line, as the contract asks of start-up
// failures and as log collectors expect of stderr.
func oneLine(err error) string {
	return strings.Join(strings.Fields(err.Error()), " ")
}

// Command ledger runs the example consumer (package example/ledger) as a
// service, wired as cmd/billing wires billing: it applies the RuleActivated
// events labeling delivers to POST /internal/v1/events (and, when NATS_URL is
// set, through its own JetStream durable), once each, and answers
// GET /v1/entries and GET /v1/entries/count. Its commands are the table
// below; `ledger help` prints them.
package main

import (
	"io"
	"os"

	"github.com/acme/outboxpair/infra/cli"
)

func main() { os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)) }

// program is the command table.
var program = cli.Program{
	Name:    "ledger",
	Default: "serve",
	Commands: []cli.Command{
		{Name: "serve", Summary: "apply migrations, then serve HTTP (and consume the stream when NATS_URL is set) until SIGINT/SIGTERM", Run: serve},
		{Name: "migrate", Summary: "apply pending migrations and exit", Run: migrate},
	},
	Environment: environment,
}

// run is the whole program, so tests can drive it without a process. Exit
// codes: 0 success, 1 failure (a bad setting included), 2 usage.
func run(args []string, lookup cli.Lookup, stdout, stderr io.Writer) int {
	return program.Run(args, lookup, stdout, stderr)
}

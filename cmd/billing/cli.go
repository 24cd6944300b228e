package main

import (
	"io"

	"github.com/acme/outboxpair/cmd/billing/config"
	"github.com/acme/outboxpair/infra/cli"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/service"
)

// commandTimeout bounds migrate, which may wait for a replica holding the
// migration lock, and the outbox commands, single statements, as labeling's;
// a variable so a test can shorten it.
var commandTimeout = service.StartTimeout

// program is the command table, one row a command; each lives in its own file.
// The usage text is generated from it.
var program = cli.Program{
	Name:    "billing",
	Default: "serve",
	Commands: append([]cli.Command{
		{Name: "serve", Summary: "apply migrations, then serve HTTP (and consume the stream when NATS_URL is set) until SIGINT/SIGTERM", Run: serve},
		{Name: "migrate", Summary: "apply pending migrations and exit", Run: migrate},
		{Name: "healthcheck", Summary: "exit 0 when the server on HTTP_ADDR answers /readyz with 200", Run: service.HealthcheckCommand(config.DefaultAddr)},
		{
			Name:    "nats failed",
			Summary: "print the JetStream messages billing terminated, one a line, tab-separated: stream_seq, subject, msg_id, deliveries, failed_at, reason",
			Run:     natsFailed,
		},
		{
			Name: "nats replay", Args: "ID...",
			Summary: "check these records of billing_nats_failed again under EVENTS_TOKEN (and EVENTS_TOKEN_PREVIOUS); apply each that passes, once, and delete it",
			Parse:   parseReplay,
		},
	}, cli.OutboxCommands(withOutboxStore, "provider")...),
	Environment: envvar.BillingService.Usage(),
}

// run is the whole program, so tests can drive it without a process. Exit codes:
// 0 success, 1 failure (a bad setting included), 2 usage.
func run(args []string, lookup envvar.Lookup, stdout, stderr io.Writer) int {
	return program.Run(args, lookup, stdout, stderr)
}

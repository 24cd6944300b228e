package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/service"
)

const usage = `usage: billing [serve | migrate | healthcheck | nats failed]
configuration (environment): ` + "DATABASE_URL, EVENTS_TOKEN (required by serve); HTTP_ADDR, RECEIPTS_RETENTION, CLEANUP_INTERVAL, HTTP_REQUEST_TIMEOUT, DB_STATEMENT_TIMEOUT, DB_LOCK_TIMEOUT, NATS_URL, NATS_ACK_WAIT;\n" +
	"serve also: AUTH_JWKS_URL, AUTH_ISSUER, AUTH_AUDIENCE (required together), or AUTH_DISABLED=true\n"

// commandTimeout bounds migrate, which may wait for a replica holding the
// migration lock; a variable so a test can shorten it.
var commandTimeout = service.StartTimeout

// action runs one command: it reads the configuration it needs through lookup and
// writes its output to stdout.
type action func(lookup config.Lookup, stdout io.Writer) error

// commands is the dispatch table, one entry a command; each lives in its own
// file. None takes arguments.
var commands = map[string]action{
	"serve":       serve,
	"migrate":     migrate,
	"healthcheck": healthcheck,
	"nats failed": natsFailed,
}

// run is the whole program, so tests can drive it without a process. Exit codes:
// 0 success, 1 failure (a bad setting included), 2 usage.
func run(args []string, lookup config.Lookup, stdout, stderr io.Writer) int {
	name := "serve"
	if len(args) > 0 {
		name = args[0]
	}
	if len(args) == 2 && args[0] == "nats" && args[1] == "failed" {
		name, args = "nats failed", args[:1]
	}
	if name == "help" || name == "-h" || name == "--help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	act, ok := commands[name]
	if !ok || len(args) > 1 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	if err := act(lookup, stdout); err != nil {
		fmt.Fprintf(stderr, "billing: %s\n", strings.Join(strings.Fields(err.Error()), " "))
		return 1
	}
	return 0
}

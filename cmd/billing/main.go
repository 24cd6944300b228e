// Command billing runs the billing service: it applies the events Labeling
// delivers to POST /internal/v1/events, once each, and answers quota reads.
//
//	billing [serve]      migrate, then serve until SIGINT/SIGTERM
//	billing migrate      apply pending migrations and exit
//	billing healthcheck  exit 0 when the server on HTTP_ADDR is ready
//	billing nats failed  print the JetStream messages billing terminated
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/migrations"
)

const usage = `usage: billing [serve | migrate | healthcheck | nats failed]
configuration (environment): ` + "DATABASE_URL, EVENTS_TOKEN (required); HTTP_ADDR, RECEIPTS_RETENTION, CLEANUP_INTERVAL, NATS_URL, NATS_ACK_WAIT\n"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	if len(args) == 2 && args[0] == "nats" && args[1] == "failed" {
		cmd, args = "nats failed", args[:1]
	}
	switch {
	case cmd == "help" || cmd == "-h" || cmd == "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case len(args) > 1, cmd != "serve" && cmd != "migrate" && cmd != "healthcheck" && cmd != "nats failed":
		fmt.Fprint(stderr, usage)
		return 2
	}
	cfg, err := config.LoadBilling(os.LookupEnv)
	if err != nil {
		fmt.Fprintf(stderr, "billing: %v\n", err)
		return 1
	}
	switch cmd {
	case "healthcheck":
		err = service.Healthcheck(cfg.HTTPAddr)
	case "nats failed":
		err = natsFailed(cfg, stdout)
	case "migrate":
		err = postgres.MigrateURL(context.Background(), cfg.DatabaseURL, migrations.Billing, service.Logger("billing"))
	default:
		err = serve(cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "billing: %v\n", err)
		return 1
	}
	return 0
}

func serve(cfg config.Billing) error {
	return service.Run(
		fx.Supply(
			service.Logger("billing"),
			postgres.Config{URL: cfg.DatabaseURL, Migrations: migrations.Billing},
			web.Config{Addr: cfg.HTTPAddr},
			retention.Config{Interval: cfg.CleanupInterval},
			billing.Config{EventsToken: cfg.EventsToken, ReceiptsRetention: cfg.ReceiptsRetention},
		),
		fx.Provide(func(p *pgxpool.Pool) web.Pinger { return p }),
		postgres.Module,
		web.Module,
		retention.Module,
		billing.Module,
		natsConsumer(cfg),
	)
}

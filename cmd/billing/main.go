// Command billing runs the billing service: it applies the events Labeling
// delivers to POST /internal/v1/events, once each, and answers quota reads.
//
//	billing [serve]      migrate, then serve until SIGINT/SIGTERM
//	billing migrate      apply pending migrations and exit
//	billing healthcheck  exit 0 when the server on HTTP_ADDR is ready
package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/migrations"
)

const usage = `usage: billing [serve | migrate | healthcheck]
configuration (environment): ` + "DATABASE_URL, EVENTS_TOKEN (required); HTTP_ADDR, RECEIPTS_RETENTION, CLEANUP_INTERVAL;\n" +
	"serve also: AUTH_JWKS_URL, AUTH_ISSUER, AUTH_AUDIENCE (required together), or AUTH_DISABLED=true\n"

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

func run(args []string, stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	switch {
	case cmd == "help" || cmd == "-h" || cmd == "--help":
		fmt.Fprint(stdout, usage)
		return 0
	case len(args) > 1, cmd != "serve" && cmd != "migrate" && cmd != "healthcheck":
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
	case "migrate":
		err = postgres.MigrateURL(context.Background(), cfg.DatabaseURL, migrations.Billing, service.Logger("billing"))
	default:
		// Only serve reads AUTH_*: migrate and healthcheck never need them.
		var authCfg config.Auth
		if authCfg, err = config.LoadAuth(os.LookupEnv); err == nil {
			err = serve(cfg, auth.SettingsFrom(authCfg))
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "billing: %v\n", err)
		return 1
	}
	return 0
}

func serve(cfg config.Billing, authn auth.Settings) error {
	return service.Run(
		fx.Supply(
			service.Logger("billing"),
			postgres.Config{URL: cfg.DatabaseURL, Migrations: migrations.Billing},
			web.Config{Addr: cfg.HTTPAddr},
			retention.Config{Interval: cfg.CleanupInterval},
			billing.Config{EventsToken: cfg.EventsToken, ReceiptsRetention: cfg.ReceiptsRetention},
			authn,
		),
		fx.Provide(func(p *pgxpool.Pool) web.Pinger { return p }),
		postgres.Module,
		web.Module,
		auth.Module,
		retention.Module,
		billing.Module,
	)
}

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
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/migrations"
)

const usage = `usage: billing [serve | migrate | healthcheck | nats failed]
configuration (environment): ` + "DATABASE_URL, EVENTS_TOKEN (required by serve); HTTP_ADDR, RECEIPTS_RETENTION, CLEANUP_INTERVAL, HTTP_REQUEST_TIMEOUT, DB_STATEMENT_TIMEOUT, DB_LOCK_TIMEOUT, NATS_URL, NATS_ACK_WAIT;\n" +
	"serve also: AUTH_JWKS_URL, AUTH_ISSUER, AUTH_AUDIENCE (required together), or AUTH_DISABLED=true\n"

// commandTimeout bounds migrate, which may wait for a replica holding the
// migration lock; a variable so a test can shorten it.
var commandTimeout = service.StartTimeout

func main() { os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)) }

func run(args []string, lookup config.Lookup, stdout, stderr io.Writer) int {
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
	var err error
	switch cmd {
	case "healthcheck":
		// HTTP_ADDR only: a health check needs no secret and no database.
		err = service.Healthcheck(config.LoadHTTPAddr(lookup, ":8081"))
	case "nats failed":
		// DATABASE_URL only, like every operator command.
		var cfg config.Command
		if cfg, err = config.LoadCommand(lookup); err == nil {
			err = natsFailed(cfg, stdout)
		}
	case "migrate":
		// DATABASE_URL only; bounded like labeling's, and stopped by a signal.
		var cfg config.Command
		if cfg, err = config.LoadCommand(lookup); err == nil {
			ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, commandTimeout)
			defer cancel()
			err = postgres.MigrateURL(ctx, cfg.DatabaseURL, migrations.Billing, slog.New(slog.NewJSONHandler(stdout, nil)).With("service", "billing"))
		}
	default:
		// Only serve reads AUTH_*: migrate and healthcheck never need them.
		var cfg config.Billing
		var authCfg config.Auth
		if cfg, err = config.LoadBilling(lookup); err == nil {
			if authCfg, err = config.LoadAuth(lookup); err == nil {
				err = serve(cfg, auth.SettingsFrom(authCfg))
			}
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "billing: %s\n", strings.Join(strings.Fields(err.Error()), " "))
		return 1
	}
	return 0
}

func serve(cfg config.Billing, authn auth.Settings) error {
	return service.Run(
		fx.Supply(
			service.Logger("billing"),
			postgres.Config{URL: cfg.DatabaseURL, Migrations: migrations.Billing, Bounds: postgres.Bounds{
				StatementTimeout: cfg.StatementTimeout, LockTimeout: cfg.LockTimeout,
			}},
			web.Config{Addr: cfg.HTTPAddr, RequestTimeout: cfg.RequestTimeout},
			retention.Config{Interval: cfg.CleanupInterval},
			billing.Config{EventsToken: cfg.EventsToken, ReceiptsRetention: cfg.ReceiptsRetention},
			authn,
			telemetry.Config{Service: "billing", Lookup: os.LookupEnv},
		),
		// First, so its flush stops last; off (and free) unless OTEL_EXPORTER_OTLP_ENDPOINT is set.
		service.StopWithin("telemetry-stop", service.TelemetryStopTimeout, telemetry.Module),
		fx.Provide(func(p *pgxpool.Pool) web.Pinger { return p }),
		postgres.Module,
		web.Module,
		auth.Module,
		// Stops after the HTTP server has drained, within its own share.
		service.StopWithin("retention-stop", service.CleanupStopTimeout, retention.Module),
		billing.Module,
		// Stops after the HTTP server has drained, within its own share.
		service.StopWithin("nats-stop", service.RelayStopTimeout, natsConsumer(cfg)),
	)
}

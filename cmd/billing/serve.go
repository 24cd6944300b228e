package main

import (
	"io"
	"log/slog"

	"go.uber.org/fx"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/migrations"
)

// serve is `billing serve`, the default command: it migrates, then serves HTTP
// (and consumes the stream when NATS_URL is set) until SIGINT or SIGTERM.
func serve(lookup config.Lookup, _, _ io.Writer) error {
	cfg, err := config.LoadBilling(lookup)
	if err != nil {
		return err
	}
	// Only serve reads AUTH_*: migrate and healthcheck never need them.
	authCfg, err := config.LoadAuth(lookup)
	if err != nil {
		return err
	}
	cfg.HTTP.Addr = config.ServeAddr(lookup, cfg.HTTP.Addr, authCfg.Disabled)
	return serveApp(cfg, authCfg.Settings(), lookup)
}

// serveApp is the billing app: the pool (migrated on start), the HTTP server, the
// cleanup, the quota API behind authentication and the event intake, the
// JetStream consumer when configured, and tracing when OTEL_* asks for it.
func serveApp(cfg config.Billing, authn auth.Settings, lookup config.Lookup) error {
	logger := service.Logger("billing")
	logDefaultDatabase(logger, cfg.DatabaseDefaulted, cfg.DatabaseURL)
	service.WarnOpenListen(logger, cfg.HTTP.Addr, authn.Disabled)
	return service.Run(serveOptions(cfg, authn, lookup, logger))
}

// serveOptions is the billing app serveApp runs.
func serveOptions(cfg config.Billing, authn auth.Settings, lookup config.Lookup, logger *slog.Logger) fx.Option {
	return fx.Options(
		fx.Supply(
			logger,
			database.Config{URL: cfg.DatabaseURL, Migrations: migrations.Billing, Bounds: cfg.Bounds},
			cfg.HTTP,
			cfg.Cleanup,
			cfg.Billing,
			authn,
			telemetry.Config{Service: "billing", Lookup: lookup},
			consoleConfig(cfg),
		),
		// First, so its flush stops last; off (and free) unless OTEL_EXPORTER_OTLP_ENDPOINT is set.
		telemetry.Module,
		fx.Provide(func(db sqldb.DB) web.Pinger { return db }),
		// Closed after every user of it has stopped, within its own share.
		database.Module,
		web.Module,
		auth.Module,
		// Stops after the HTTP server has drained, within its own share.
		retention.Module,
		billing.Module,
		// The operator pages under /console/: reads, and replay when wired.
		billing.ConsoleModule,
		// Stops after the HTTP server has drained, within its own share.
		natsConsumer(cfg),
	)
}

// logDefaultDatabase says, at start, that DATABASE_URL was unset and which
// SQLite file is used instead.
func logDefaultDatabase(logger *slog.Logger, defaulted bool, url string) {
	if defaulted {
		logger.Info("DATABASE_URL is unset; using the SQLite file "+url+" under the working directory", "database_url", url)
	}
}

// consoleConfig is billing's console: its header and the replay of NATS
// records under EVENTS_TOKEN (and EVENTS_TOKEN_PREVIOUS), as `billing nats
// replay` checks them.
func consoleConfig(cfg config.Billing) billing.ConsoleConfig {
	transport := config.TransportHTTP
	if cfg.NATS.URL != "" {
		transport = "http and nats"
	}
	keys := [][]byte{[]byte(cfg.Billing.EventsToken)}
	if cfg.Billing.EventsTokenPrevious != "" {
		keys = append(keys, []byte(cfg.Billing.EventsTokenPrevious))
	}
	return billing.ConsoleConfig{Transport: transport, LabelingConsoleURL: cfg.ConsoleLabelingURL, ReplayKeys: keys}
}

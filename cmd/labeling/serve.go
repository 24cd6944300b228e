package main

import (
	"io"
	"log/slog"

	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/delivery"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/labeling"
	"github.com/acme/outboxpair/migrations"
)

// serve is `labeling serve`, the default command: it migrates, then serves HTTP
// and relays the outbox until SIGINT or SIGTERM.
func serve(lookup config.Lookup, _, _ io.Writer) error {
	cfg, err := config.LoadLabeling(lookup)
	if err != nil {
		return err
	}
	// Only serve reads AUTH_*: the operator commands never need them.
	authCfg, err := config.LoadAuth(lookup)
	if err != nil {
		return err
	}
	cfg.HTTP.Addr = config.ServeAddr(lookup, cfg.HTTP.Addr, authCfg.Disabled)
	logger := service.Logger("labeling")
	logDefaultDatabase(logger, cfg.DatabaseDefaulted, cfg.DatabaseURL)
	service.WarnOpenListen(logger, cfg.HTTP.Addr, authCfg.Disabled)
	return service.Run(serveOptions(cfg, authCfg.Settings(), lookup, logger, labeling.Events()))
}

// serveOptions is the labeling app: the pool (migrated on start), the HTTP server,
// the outbox relay (publishing events) and cleanup, and the rules API behind
// authentication.
func serveOptions(cfg config.Labeling, authn auth.Settings, lookup config.Lookup, logger *slog.Logger, events []labeling.Publication) fx.Option {
	return fx.Options(
		fx.Supply(
			logger,
			database.Config{URL: cfg.DatabaseURL, Migrations: migrations.Labeling, Bounds: cfg.Bounds},
			cfg.HTTP,
			cfg.Relay,
			cfg.Cleanup,
			authn,
			telemetry.Config{Service: "labeling", Lookup: lookup},
			labeling.ConsoleConfig{Transport: cfg.EventsTransport, BillingConsoleURL: cfg.ConsoleBillingURL, TraceURL: cfg.ConsoleTraceURL},
		),
		// First, so its flush stops last; off (and free) unless OTEL_EXPORTER_OTLP_ENDPOINT is set.
		telemetry.Module,
		transport(cfg, logger, events),
		fx.Provide(
			func(db sqldb.DB) web.Pinger { return db },
			// The stores of the database's dialect, chosen once.
			outbox.NewStore,
		),
		// Closed after every user of it has stopped, within its own share.
		database.Module,
		web.Module,
		auth.Module,
		// Each background component stops within its own share of the budget,
		// after the HTTP server has drained (service.Run stops the server first).
		outbox.Module,
		retention.Module,
		labeling.Module,
		// The operator pages under /console/: reads and admin actions only.
		labeling.ConsoleModule,
	)
}

// transport provides the relay's subscribers: events, each carried by the one
// transport EVENTS_TRANSPORT chose. HTTP posts to BILLING_URL (the default),
// nats publishes to JetStream (infra/stream); neither has a list of its own.
func transport(cfg config.Labeling, logger *slog.Logger, events []labeling.Publication) fx.Option {
	if cfg.EventsTransport == config.TransportNATS {
		return fx.Options(
			fx.Provide(
				func() (*stream.Publisher, error) { return stream.NewPublisher(cfg.NATS, logger) },
				func(p *stream.Publisher) []outbox.Subscriber { return labeling.Subscribers(events, p.Publish) },
			),
			// The publisher is the relay's transport: its stop is part of the
			// relay's share.
			stopbudget.Part(outbox.StopShare.Name, stream.Module),
		)
	}
	return fx.Provide(func() ([]outbox.Subscriber, error) {
		billing, err := delivery.New(delivery.Config{
			BaseURL:      cfg.BillingURL,
			Token:        cfg.EventsToken,
			Timeout:      cfg.Relay.HandlerTimeout,
			MaxIdleConns: cfg.Relay.Workers,
		}, logger)
		if err != nil {
			return nil, err
		}
		return labeling.Subscribers(events, billing.Deliver), nil
	})
}

// logDefaultDatabase says, at start, that DATABASE_URL was unset and which
// SQLite file is used instead.
func logDefaultDatabase(logger *slog.Logger, defaulted bool, url string) {
	if defaulted {
		logger.Info("DATABASE_URL is unset; using the SQLite file "+url+" under the working directory", "database_url", url)
	}
}

package main

import (
	"io"

	"go.uber.org/fx"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/cmd/billing/config"
	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/database"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/migrations"
)

// serve is `billing serve`, the default command: it migrates, then serves HTTP
// (and consumes the stream when NATS_URL is set) until SIGINT or SIGTERM.
func serve(lookup envvar.Lookup, _, _ io.Writer) error {
	cfg, err := config.LoadBilling(lookup)
	if err != nil {
		return err
	}
	// Only serve reads AUTH_*: migrate and healthcheck never need them.
	authCfg, err := envvar.LoadAuth(lookup)
	if err != nil {
		return err
	}
	cfg.HTTP.Addr = envvar.ServeAddr(lookup, cfg.HTTP.Addr, authCfg.Disabled)
	logger := service.Logger("billing")
	return service.Serve(app(cfg, authCfg.Settings(), lookup), logger, serveOptions(cfg))
}

// app is what billing's serve shares with labeling's.
func app(cfg config.Billing, authn auth.Settings, lookup envvar.Lookup) service.App {
	return service.App{
		Name:              "billing",
		Database:          database.Config{URL: cfg.DatabaseURL, Migrations: migrations.Billing, Bounds: cfg.Bounds},
		DatabaseDefaulted: cfg.DatabaseDefaulted,
		HTTP:              cfg.HTTP,
		Cleanup:           cfg.Cleanup,
		Auth:              authn,
		Lookup:            lookup,
	}
}

// serveOptions is billing's part of the app: the cleanup, the quota API and
// the event intake, the console, billing's outbox (its relay calling the
// provider when PROVIDER_URL is set), and the JetStream consumer when
// configured.
func serveOptions(cfg config.Billing) fx.Option {
	return fx.Options(
		fx.Supply(cfg.Billing, consoleConfig(cfg)),
		// Stops after the HTTP server has drained, within its own share.
		retention.Module,
		billing.Module,
		// The operator pages under /console/: reads, and replay when wired.
		billing.ConsoleModule,
		// Billing's outbox and, with PROVIDER_URL, its relay calling the
		// provider: it stops after the NATS consumer (registered before it),
		// within its own share or the consumer's (providerRelay).
		providerRelay(cfg),
		// Stops after the HTTP server has drained, within its own share.
		natsConsumer(cfg),
	)
}

// consoleConfig is billing's console: its header and the replay of NATS
// records under EVENTS_TOKEN (and EVENTS_TOKEN_PREVIOUS), as `billing nats
// replay` checks them.
func consoleConfig(cfg config.Billing) billing.ConsoleConfig {
	transport := "http"
	if cfg.NATS.URL != "" {
		transport = "http and nats"
	}
	keys := [][]byte{[]byte(cfg.Billing.EventsToken)}
	if cfg.Billing.EventsTokenPrevious != "" {
		keys = append(keys, []byte(cfg.Billing.EventsTokenPrevious))
	}
	return billing.ConsoleConfig{Transport: transport, LabelingConsoleURL: cfg.ConsoleLabelingURL, ReplayKeys: keys}
}

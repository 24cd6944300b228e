package main

import (
	"fmt"
	"io"
	"log/slog"
	"slices"

	"go.uber.org/fx"

	"github.com/acme/outboxpair/cmd/labeling/config"
	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/delivery"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/labeling"
	"github.com/acme/outboxpair/migrations"
)

// serve is `labeling serve`, the default command: it migrates, then serves HTTP
// and relays the outbox until SIGINT or SIGTERM.
func serve(lookup envvar.Lookup, _, _ io.Writer) error {
	cfg, err := config.LoadLabeling(lookup)
	if err != nil {
		return err
	}
	// Only serve reads AUTH_*: the operator commands never need them.
	authCfg, err := envvar.LoadAuth(lookup)
	if err != nil {
		return err
	}
	cfg.HTTP.Addr = envvar.ServeAddr(lookup, cfg.HTTP.Addr, authCfg.Disabled)
	logger := service.Logger("labeling")
	return service.Serve(app(cfg, authCfg.Settings(), lookup), logger, serveOptions(cfg, logger, labeling.Events()))
}

// app is what labeling's serve shares with billing's.
func app(cfg config.Labeling, authn auth.Settings, lookup envvar.Lookup) service.App {
	return service.App{
		Name:              "labeling",
		Database:          database.Config{URL: cfg.DatabaseURL, Migrations: migrations.Labeling, Bounds: cfg.Bounds},
		DatabaseDefaulted: cfg.DatabaseDefaulted,
		HTTP:              cfg.HTTP,
		Cleanup:           cfg.Cleanup,
		Auth:              authn,
		Lookup:            lookup,
	}
}

// serveOptions is labeling's part of the app: the outbox relay (publishing
// events through the transport) and its cleanup, and the rules API and the
// console.
func serveOptions(cfg config.Labeling, logger *slog.Logger, events []labeling.Publication) fx.Option {
	return fx.Options(
		fx.Supply(
			cfg.Relay,
			labeling.ConsoleConfig{Transport: cfg.EventsTransport, BillingConsoleURL: cfg.ConsoleBillingURL, TraceURL: cfg.ConsoleTraceURL},
		),
		transport(cfg, logger, events),
		// The stores of the database's dialect, chosen once.
		fx.Provide(outbox.NewStore),
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
// transport EVENTS_TRANSPORT chose. HTTP posts to BILLING_URL (the default)
// and, for each further subscriber of SUBSCRIBERS, to its own URL with its
// own token (a route, so each event of its types gets a row for it, and a lane,
// its own relay); nats publishes to JetStream (infra/stream).
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
	billing := fx.Provide(func() ([]outbox.Subscriber, error) {
		billing, err := delivery.New(delivery.Config{
			BaseURL:      cfg.BillingURL,
			Token:        cfg.EventsToken,
			Timeout:      cfg.Relay.HandlerTimeout,
			MaxIdleConns: cfg.Relay.Workers,
			Format:       cfg.EventsFormat,
		}, logger)
		if err != nil {
			return nil, err
		}
		return labeling.Subscribers(events, billing.Deliver), nil
	})
	if len(cfg.Subscribers) == 0 {
		return billing
	}
	routes := make([]outbox.Route, len(cfg.Subscribers))
	for i, s := range cfg.Subscribers {
		routes[i] = outbox.Route{Subscriber: s.Name, Tags: s.Types}
	}
	return fx.Options(billing,
		// The use cases' Append gives each route its row (labeling.Module).
		fx.Supply(routes),
		fx.Provide(func() ([]outbox.Lane, error) {
			lanes := make([]outbox.Lane, len(cfg.Subscribers))
			for i, s := range cfg.Subscribers {
				client, err := delivery.New(delivery.Config{
					BaseURL:      s.URL,
					Token:        s.Token,
					Timeout:      cfg.Relay.HandlerTimeout,
					MaxIdleConns: cfg.Relay.Workers,
					Format:       cfg.EventsFormat,
					Name:         s.Name,
				}, logger.With("subscriber", s.Name))
				if err != nil {
					return nil, fmt.Errorf("%s: %w", config.SubscriberVar(s.Name, "URL"), err)
				}
				lanes[i] = outbox.Lane{Subscriber: s.Name, Subscribers: labeling.Subscribers(only(events, s.Types), client.Deliver)}
			}
			return lanes, nil
		}),
	)
}

// only is the events of types, in events' order.
func only(events []labeling.Publication, types []string) []labeling.Publication {
	var out []labeling.Publication
	for i, tag := range labeling.Tags(events) {
		if slices.Contains(types, tag) {
			out = append(out, events[i])
		}
	}
	return out
}

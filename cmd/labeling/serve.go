package main

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/delivery"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/labeling"
	"github.com/acme/outboxpair/migrations"
)

// serveOptions is the labeling app: the pool (migrated on start), the HTTP server,
// the outbox relay and cleanup, and the rules API.
func serveOptions(cfg config.Labeling, logger *slog.Logger) fx.Option {
	return fx.Options(
		fx.Supply(
			logger,
			postgres.Config{URL: cfg.DatabaseURL, Migrations: migrations.Labeling},
			web.Config{Addr: cfg.HTTPAddr},
			outbox.Config{
				PollInterval:       cfg.PollInterval,
				ClaimSize:          cfg.ClaimSize,
				HandlerTimeout:     cfg.HandlerTimeout,
				Lease:              cfg.Lease,
				MaxAttempts:        cfg.MaxAttempts,
				RetryBase:          cfg.RetryBase,
				RetryMax:           cfg.RetryMax,
				ProcessedRetention: cfg.ProcessedRetention,
				Notify:             cfg.OutboxNotify,
			},
			retention.Config{Interval: cfg.CleanupInterval},
		),
		fx.Provide(
			func() (*delivery.Client, error) {
				return delivery.New(delivery.Config{
					BaseURL:      cfg.BillingURL,
					Token:        cfg.EventsToken,
					Timeout:      cfg.HandlerTimeout,
					MaxIdleConns: cfg.ClaimSize,
				}, logger)
			},
			subscribers,
			func(p *pgxpool.Pool) web.Pinger { return p },
		),
		postgres.Module,
		web.Module,
		outbox.Module,
		retention.Module,
		labeling.Module,
	)
}

// subscribers is what the relay dispatches each tag to. Every tag labeling
// appends needs a subscriber here, or its rows are retried until dead-lettered.
func subscribers(billing *delivery.Client) []outbox.Subscriber {
	return []outbox.Subscriber{
		delivery.Subscriber[labeling.RuleActivated](billing),
		delivery.Subscriber[labeling.RuleDeactivated](billing),
	}
}

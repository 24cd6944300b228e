package main

import (
	"log/slog"

	"go.uber.org/fx"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/webhook"
)

// providerRelay is billing's outbox (contract section 10): its store on
// billing_outbox_events and the retention of its processed rows
// (OUTBOX_PROCESSED_RETENTION), and, when PROVIDER_URL is set, the relay
// (the OUTBOX_* settings, as labeling's) whose one subscriber calls the
// provider (infra/webhook) for each QuotaChanged row; the relay is also the
// outbox.Nudger the Service wakes after each apply that appended a row.
// PROVIDER_URL unset: no relay; the rows are kept, pending with no attempt
// spent, and nothing is called, which one INFO line says at start.
//
// The relay's stop takes outbox.StopShare (8s) of the stop budget, after the
// HTTP drain; with the NATS consumer (whose share is 8s too) it stops within
// the consumer's share instead, one after the other, so that the budget stays
// under service.StopGrace at the largest HTTP_REQUEST_TIMEOUT (contract
// section 5). What a stop cut short leaves (a call cancelled, a claim not
// released) is a row claimed again after its lease: the provider dedups the
// call by its Idempotency-Key.
func providerRelay(cfg config.Billing) fx.Option {
	store := fx.Provide(func(db sqldb.DB) outbox.Store { return outbox.NewStore(db, outbox.WithTable(billing.OutboxTable)) })
	if cfg.Provider.URL == "" {
		return fx.Options(store,
			fx.Provide(fx.Annotate(
				func(s outbox.Store) retention.Policy {
					return outbox.ProcessedRetention(s, cfg.Relay.ProcessedRetention)
				},
				fx.ResultTags(`group:"retention"`),
			)),
			fx.Invoke(func(logger *slog.Logger) {
				logger.Info("PROVIDER_URL is not set: billing's outbox relay does not run; QuotaChanged rows are kept in "+
					billing.OutboxTable+" and no provider is called", "table", billing.OutboxTable)
			}),
		)
	}
	relay := outbox.Module
	if cfg.NATS.URL != "" {
		relay = stopbudget.Part(stream.ConsumerStopShare.Name, outbox.Components)
	}
	return fx.Options(store,
		fx.Supply(cfg.Relay),
		fx.Provide(func(logger *slog.Logger) ([]outbox.Subscriber, error) {
			client, err := webhook.New(webhook.Config{
				URL:          cfg.Provider.URL,
				Secrets:      cfg.Provider.Secrets,
				MaxIdleConns: cfg.Relay.Workers,
			}, logger)
			if err != nil {
				return nil, err
			}
			return []outbox.Subscriber{webhook.Subscriber[billing.QuotaChanged](client)}, nil
		}),
		relay,
	)
}

package main

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/cmd/billing/config"
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
// provider (infra/webhook) for each QuotaChanged row, and the catch-up of
// the orgs never told to the provider (catchUp); the relay is also the
// outbox.Nudger the Service wakes after each apply that appended a row.
// PROVIDER_URL unset: no relay, and no QuotaChanged row is appended
// (billing.NoProvider), so the table cannot grow without bound; the rows
// pending from a time with a provider stay, and nothing is called, which one
// INFO line says at start. The backlog gauges
// (billing_outbox_oldest_pending_age_seconds, billing_outbox_failed_rows) are
// exported either way (backlogGauges).
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
			fx.Supply(&billing.NoProvider{}),
			// Their stop (an unregister) within the retention's share: no step of its own.
			stopbudget.Part(retention.StopShare.Name, backlogGauges),
			fx.Provide(fx.Annotate(
				func(s outbox.Store) retention.Policy {
					return outbox.ProcessedRetention(s, cfg.Relay.ProcessedRetention)
				},
				fx.ResultTags(`group:"retention"`),
			)),
			fx.Invoke(func(logger *slog.Logger) {
				logger.Info("PROVIDER_URL is not set: billing's outbox relay does not run and no provider is called; no QuotaChanged row is appended to "+
					billing.OutboxTable+" (rows pending from a time with a provider stay, delivered once one is configured)", "table", billing.OutboxTable)
			}),
		)
	}
	relay := stopbudget.Module(outbox.StopShare, outbox.Components, catchUp)
	if cfg.NATS.URL != "" {
		relay = stopbudget.Part(stream.ConsumerStopShare.Name, outbox.Components, catchUp)
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

// catchUp runs billing.CatchUp in the background from the app's start (the
// migrations are done by then), so that an org whose count a billing older
// than migration 00006 applied, never told to the provider, gets its
// QuotaChanged row; the relay is nudged after each batch. It stops (cancelled,
// then awaited) within the relay's share, before the relay.
var catchUp = fx.Invoke(func(lc fx.Lifecycle, db sqldb.DB, nudger outbox.Nudger, logger *slog.Logger) {
	var stop func()
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { stop = billing.RunCatchUp(db, nudger, logger); return nil },
		OnStop:  func(context.Context) error { stop(); return nil },
	})
})

// backlogGauges registers the backlog gauges of billing's outbox
// (outbox.NewBacklogCollector) for the app's lifetime when no relay runs (the
// relay's outbox.Module registers them otherwise), so that rows pending or
// dead-lettered from a time with a provider are seen all the same.
var backlogGauges = fx.Invoke(func(lc fx.Lifecycle, store outbox.Store) {
	c := outbox.NewBacklogCollector(store)
	lc.Append(fx.Hook{
		OnStart: func(context.Context) error { return prometheus.Register(c) },
		OnStop:  func(context.Context) error { prometheus.Unregister(c); return nil },
	})
})

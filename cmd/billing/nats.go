package main

import (
	"log/slog"

	"go.uber.org/fx"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/stream"
)

// natsConsumer is billing's durable consumer of LABELING_EVENTS when NATS_URL is
// set, nothing otherwise. Registered after billing.Module, it starts last and
// stops first, before the pool closes, within its own share of the stop
// budget (stream.ConsumerStopShare).
func natsConsumer(cfg config.Billing) fx.Option {
	if cfg.NATS.URL == "" {
		return fx.Options()
	}
	return stopbudget.Module(stream.ConsumerStopShare, fx.Invoke(func(lc fx.Lifecycle, svc *billing.Service, logger *slog.Logger) error {
		handle, err := svc.NATSHandler(cfg.NATSIntake)
		if err != nil {
			return err
		}
		c, err := stream.NewConsumer(cfg.NATS, handle, logger)
		if err != nil {
			return err
		}
		lc.Append(fx.Hook{OnStart: c.Start, OnStop: c.Stop})
		return nil
	}))
}

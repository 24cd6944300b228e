package main

import (
	"log/slog"

	"go.uber.org/fx"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/cmd/billing/config"
	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/stream"
)

// natsConsumer is billing's durable consumer of LABELING_EVENTS when NATS_URL is
// set, nothing otherwise; its durable filters the subjects of the types
// billing has a handler for. Registered after billing.Module, it starts last and
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
		// Its durable takes the types billing handles, nothing else.
		cc := cfg.NATS
		cc.Types = svc.Types()
		c, err := stream.NewConsumer(cc, handle, logger)
		if err != nil {
			return err
		}
		lc.Append(fx.Hook{OnStart: c.Start, OnStop: c.Stop})
		return nil
	}))
}

package main

import (
	"context"
	"io"
	"log/slog"

	"github.com/labstack/echo/v4"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/cli"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/infra/web"
)

// serve is `ledger serve`: it migrates, then serves HTTP (and consumes the
// stream when NATS_URL is set) until SIGINT or SIGTERM. It wires the shared
// modules as service.App does for billing, without infra/auth: the ledger's
// reads carry no authentication (and so it logs no AUTH_DISABLED warning).
func serve(lookup cli.Lookup, _, _ io.Writer) error {
	s, err := load(lookup)
	if err != nil {
		return err
	}
	logger := service.Logger(ledger.Name)
	if s.DatabaseDefaulted {
		service.LogDefaultDatabase(logger, s.DatabaseURL)
	}
	if !service.Loopback(s.Addr) {
		logger.Warn("HTTP_ADDR "+s.Addr+" is reachable from other machines: GET /v1/entries answers anyone who can reach it",
			"http_addr", s.Addr)
	}
	return service.Run(
		fx.Supply(
			logger,
			database.Config{URL: s.DatabaseURL, Migrations: ledger.Migrations, Bounds: sqldb.Bounds{
				StatementTimeout: sqldb.DefaultStatementTimeout, LockTimeout: sqldb.DefaultLockTimeout}},
			web.Config{Addr: s.Addr, RequestTimeout: web.DefaultRequestTimeout},
			retention.Config{Interval: retention.DefaultInterval},
			telemetry.Config{Service: ledger.Name, Lookup: lookup},
		),
		telemetry.Module,
		fx.Provide(func(db sqldb.DB) web.Pinger { return db }),
		database.Module,
		web.Module,
		retention.Module,
		fx.Provide(
			func(db sqldb.DB, logger *slog.Logger) *inbox.Inbox[ledger.Entry] {
				return inbox.New(db, logger, ledger.Consumer(), inbox.RefuseOlderThan(inbox.DefaultReceiptsRetention))
			},
			fx.Annotate(func(ib *inbox.Inbox[ledger.Entry]) retention.Policy {
				return ib.Retention(inbox.DefaultReceiptsRetention)
			}, fx.ResultTags(`group:"retention"`)),
		),
		fx.Invoke(func(e *echo.Echo, db sqldb.DB, ib *inbox.Inbox[ledger.Entry]) error {
			intake, err := inbox.NewIntake(ib, s.EventsToken, "")
			if err != nil {
				return err
			}
			ledger.Register(e, db, ib, intake)
			return nil
		}),
		natsConsumer(s),
	)
}

// natsConsumer is the ledger's durable consumer of LABELING_EVENTS when
// NATS_URL is set, nothing otherwise: it starts last and stops first, before
// the pool closes, within its share of the stop budget.
func natsConsumer(s settings) fx.Option {
	if s.NATS.URL == "" {
		return fx.Options()
	}
	return stopbudget.Module(stream.ConsumerStopShare, fx.Invoke(func(lc fx.Lifecycle, ib *inbox.Inbox[ledger.Entry], logger *slog.Logger) error {
		handle, err := ib.NATSHandler(s.NATSIntake)
		if err != nil {
			return err
		}
		cc := s.NATS
		cc.Types = ib.Types() // the durable filters the ledger's types: no other type reaches it
		c, err := stream.NewConsumer(cc, handle, logger)
		if err != nil {
			return err
		}
		lc.Append(fx.Hook{OnStart: c.Start, OnStop: c.Stop})
		return nil
	}))
}

// migrate is `ledger migrate`: it applies the pending migrations and exits.
func migrate(lookup cli.Lookup, stdout, _ io.Writer) error {
	r := &reader{lookup: lookup}
	url, defaulted := r.databaseURL()
	if r.err != nil {
		return r.err
	}
	logger := slog.New(slog.NewJSONHandler(stdout, nil)).With("service", ledger.Name)
	if defaulted {
		service.LogDefaultDatabase(logger, url)
	}
	return cli.Bounded(service.StartTimeout, func(ctx context.Context) error {
		return database.MigrateURL(ctx, url, ledger.Migrations, logger)
	})
}

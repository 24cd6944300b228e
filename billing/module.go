package billing

import (
	"log/slog"

	"github.com/labstack/echo/v4"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/sqldb"
)

// serviceParams are what the Service is built from; Nudger is billing's
// outbox relay, absent when billing runs none (PROVIDER_URL unset), and
// NoProvider is supplied when no provider is configured (then the Service
// appends no QuotaChanged rows: WithoutQuotaChanged).
type serviceParams struct {
	fx.In
	DB         sqldb.DB
	Logger     *slog.Logger
	Config     Config
	Nudger     outbox.Nudger `optional:"true"`
	NoProvider *NoProvider   `optional:"true"`
}

// Module provides billing's use cases and routes and registers the retention of
// billing_receipts with the cleanup. The app supplies Config, the sqldb.DB,
// *slog.Logger, the *echo.Echo (web.Module) and the *auth.Guard (auth.Module),
// and, when billing runs its outbox relay, the outbox.Nudger (outbox.Module)
// the Service wakes after each apply that appended a QuotaChanged row.
var Module = fx.Module("billing",
	fx.Provide(
		func(p serviceParams) *Service {
			opts := []Option{ApplyGroupMax(p.Config.ApplyGroupMax), RefuseOlderThan(p.Config.ReceiptsRetention), NudgeOnAppend(p.Nudger)}
			if p.NoProvider != nil {
				opts = append(opts, WithoutQuotaChanged())
			}
			return NewService(p.DB, p.Logger, opts...)
		},
		NewHandler,
		fx.Annotate(ReceiptsRetention, fx.ResultTags(`group:"retention"`)),
	),
	fx.Invoke(func(e *echo.Echo, h *Handler, g *auth.Guard) { h.Register(e, g) }),
)

// ReceiptsRetention is the retention of billing_receipts: receipts older than
// cfg.ReceiptsRetention are deleted. It must be longer than any window in which an
// event can still be redelivered (the relay's attempts × its capped delay, plus
// the time a dead-lettered row may wait for an operator's requeue), or a late
// redelivery would apply a second time.
func ReceiptsRetention(cfg Config, db sqldb.DB) retention.Policy {
	return retention.Policy{
		Name:   ReceiptsTable,
		Keep:   cfg.ReceiptsRetention,
		Delete: inbox.NewStore(db, ReceiptsTable, NATSFailedTable).DeleteReceipts,
	}
}

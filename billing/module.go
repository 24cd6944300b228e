package billing

import (
	"log/slog"

	"github.com/labstack/echo/v4"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/sqldb"
)

// Module provides billing's use cases and routes and registers the retention of
// billing_receipts with the cleanup. The app supplies Config, the sqldb.DB,
// *slog.Logger, the *echo.Echo (web.Module) and the *auth.Guard (auth.Module).
var Module = fx.Module("billing",
	fx.Provide(
		func(db sqldb.DB, logger *slog.Logger, cfg Config) *Service {
			return NewService(db, logger, ApplyGroupMax(cfg.ApplyGroupMax), RefuseOlderThan(cfg.ReceiptsRetention))
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

package outbox

import (
	"go.uber.org/fx"
)

// Module provides the relay (also as a Nudger) started and stopped with the app,
// and registers the retention of processed rows with the cleanup. The app supplies
// Config, []Subscriber, *pgxpool.Pool and *slog.Logger.
var Module = fx.Module("outbox",
	fx.Provide(
		fx.Annotate(NewRelay, fx.As(fx.Self()), fx.As(new(Nudger))),
	),
)

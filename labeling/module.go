package labeling

import (
	"github.com/labstack/echo/v4"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/auth"
)

// Module provides the use cases (with the stores of the database's dialect)
// and the handlers, and registers the routes on the app's echo instance. The
// app supplies the sqldb.DB, an outbox.Nudger, *echo.Echo and the *auth.Guard
// of its org routes, and, to fan out, []outbox.Route.
var Module = fx.Module("labeling",
	fx.Provide(fx.Annotate(NewService, fx.ParamTags(``, ``, `optional:"true"`)), NewHandler),
	fx.Invoke(func(e *echo.Echo, h *Handler, g *auth.Guard) { h.Register(e, g) }),
)

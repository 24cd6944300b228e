package labeling

import (
	"github.com/labstack/echo/v4"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/auth"
)

// Module provides the store, the use cases and the handlers, and registers the
// routes on the app's echo instance. The app supplies *pgxpool.Pool, an
// outbox.Nudger, *echo.Echo and the *auth.Guard of its org routes.
var Module = fx.Module("labeling",
	fx.Provide(NewStore, NewService, NewHandler),
	fx.Invoke(func(e *echo.Echo, h *Handler, g *auth.Guard) { h.Register(e, g) }),
)

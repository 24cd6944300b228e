// Package web is the HTTP layer both services share: an echo instance with the one
// error handler that maps fault codes to statuses, request bodies bounded before
// any route reads them (Bodies), strict JSON decoding, request
// metrics and logs whose labels come from fixed sets, panic recovery, the health,
// readiness and metrics endpoints, and a server that listens in Start (a taken port
// fails start-up) and, in Stop, refuses new work at once and drains what is in
// flight. The service package orders Start and Stop in the app's lifecycle.
//
// One concern a file: web.go builds the echo instance; errors.go is the one
// error handler and its code-to-status table; bodies.go bounds request
// bodies; decode.go decodes them strictly; query.go checks queries;
// middleware.go counts, logs and recovers requests; server.go listens,
// serves and drains.
package web

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/telemetry"
)

// Module provides the echo instance (traced when the app's *telemetry.Provider
// is on) and the server that runs it, and declares the server's share of the
// stop budget (StopStep, its DrainTimeout). It does not put the server in the
// lifecycle: service.Run does, last, so that the server starts after
// everything it serves and stops first.
var Module = fx.Module("web",
	fx.Provide(
		func(logger *slog.Logger, db Pinger, tp *telemetry.Provider) *echo.Echo {
			return New(logger, db, Traced(tp.On()))
		},
		NewServer,
	),
	stopbudget.Declare(StopStep, (*Server).DrainTimeout),
)

// Option changes what New builds.
type Option func(*options)

type options struct{ traced bool }

// Traced makes New trace every request (telemetry.Middleware) when on: the
// app passes its *telemetry.Provider's On, so nothing reads the global
// provider at construction. Off, or without it, a request costs nothing more.
func Traced(on bool) Option { return func(o *options) { o.traced = on } }

// Pinger answers whether the database is reachable; *pgxpool.Pool fits.
type Pinger interface {
	Ping(ctx context.Context) error
}

// New returns an echo instance with the error handler, request metrics and
// logging, and /healthz, /readyz (a ping of db) and /metrics; traced when
// opts say so (Traced).
func New(logger *slog.Logger, db Pinger, opts ...Option) *echo.Echo {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = ErrorHandler(logger)
	// Outside the request log, so that its line and the error handler's are
	// written inside the request's span. Only with tracing on (Traced), so
	// with it off a request costs nothing more, not even a closure.
	if o.traced {
		e.Use(telemetry.Middleware())
	}
	e.Use(observe(logger))
	e.Use(Bodies)

	e.GET("/healthz", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	e.GET("/readyz", func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
		defer cancel()
		if err := db.Ping(ctx); err != nil {
			return fault.Wrap(fault.Unavailable, err, "database unavailable")
		}
		return c.NoContent(http.StatusOK)
	})
	e.GET("/metrics", echo.WrapHandler(promhttp.Handler()))
	return e
}

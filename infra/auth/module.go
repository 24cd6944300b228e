package auth

import (
	"log/slog"

	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/web"
)

// Settings is how a service asks for authentication: Disabled, or a Config. The
// service's wiring fills it from the AUTH_* variables (infra/env.Auth).
type Settings struct {
	Disabled bool
	Config   Config
}

// Module provides the *Guard the HTTP slices put on their org routes, from the
// Settings the app supplies, and runs the verifier's key refresh with the app.
//
// The verifier's stop (its key refresh) is part of the server's step of the
// stop budget (web.StopStep): it takes what the drain left of that share.
var Module = stopbudget.Part(web.StopStep, fx.Module("auth",
	fx.Provide(New),
	fx.Invoke(func(lc fx.Lifecycle, v *Verifier) {
		if v != nil {
			lc.Append(fx.Hook{OnStart: v.Start, OnStop: v.Stop})
		}
	}),
))

// New returns the guard for s and its verifier (nil when disabled). Disabled logs
// one warning, so an open API never goes unnoticed in the logs.
func New(s Settings, logger *slog.Logger) (*Guard, *Verifier, error) {
	if s.Disabled {
		logger.Warn("auth: AUTH_DISABLED=true: /v1 is served without authentication; never do this outside development")
		return Disabled(), nil, nil
	}
	v, err := NewVerifier(s.Config, logger)
	if err != nil {
		return nil, nil, err
	}
	return NewGuard(v, logger), v, nil
}

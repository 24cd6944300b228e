package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/cmd/labeling/config"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/labeling"
)

// stopBudget builds labeling's serve app under env as service.Run does
// (nothing starts) and returns its stop budget, computed from the shares its
// components declared, and every stop hook appended outside a share.
func stopBudget(t *testing.T, env map[string]string) (time.Duration, []string) {
	t.Helper()
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }
	cfg, err := config.LoadLabeling(lookup)
	require.NoError(t, err)
	authCfg, err := envvar.LoadAuth(lookup)
	require.NoError(t, err)
	var (
		shares    []stopbudget.Share
		unbounded []string
		db        sqldb.DB
	)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	app := fx.New(append(service.Options(&shares, app(cfg, authCfg.Settings(), lookup).Options(logger, serveOptions(cfg, logger, labeling.Events()))),
		stopbudget.Audit(func(hook string) { unbounded = append(unbounded, hook) }),
		fx.Populate(&db), fx.NopLogger)...)
	require.NoError(t, app.Err())
	t.Cleanup(func() { _ = db.(io.Closer).Close() })
	return stopbudget.Total(shares), unbounded
}

// Contract section 5: every component that stops declares its share of the
// stop budget (a hook without one fails here), and the budget is their sum:
// the drain (HTTP_REQUEST_TIMEOUT + 2s), the relay 8s (its NATS publisher
// within it), retention 2s, the pool 1s and the spans 1s, under an
// orchestrator's 30s at the largest accepted HTTP_REQUEST_TIMEOUT.
func TestStopBudgetIsTheDeclaredShares(t *testing.T) {
	t.Parallel()
	for name, extra := range map[string]map[string]string{
		"http transport, authentication off": {},
		"nats transport, authentication on": {
			"EVENTS_TRANSPORT": config.TransportNATS, "NATS_URL": "nats://127.0.0.1:1",
			"AUTH_DISABLED": "", "AUTH_JWKS_URL": "http://127.0.0.1:1/jwks", "AUTH_ISSUER": "i", "AUTH_AUDIENCE": "a",
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := baseEnv("sqlite:" + filepath.Join(t.TempDir(), "labeling.db"))
			env["HTTP_REQUEST_TIMEOUT"] = web.MaxRequestTimeout.String()
			for k, v := range extra {
				env[k] = v
			}
			budget, unbounded := stopBudget(t, env)
			require.Empty(t, unbounded, "components that stop without a share of the stop budget")
			require.Equal(t, web.MaxRequestTimeout+2*time.Second+8*time.Second+2*time.Second+time.Second+time.Second, budget)
			require.Less(t, budget, service.StopGrace)
		})
	}
}

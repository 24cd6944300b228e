package main

import (
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/cmd/billing/config"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/web"
)

// Contract section 5: every component of billing's app that stops declares
// its share of the stop budget (a hook without one fails here), and the
// budget is their sum: the drain (HTTP_REQUEST_TIMEOUT + 2s), the NATS
// consumer 8s (its own share, when it runs), the provider relay 8s (its own
// share when it runs alone; within the NATS consumer's when both run),
// retention 2s, the pool 1s and the spans 1s: at most 29s, under an
// orchestrator's 30s at the largest accepted HTTP_REQUEST_TIMEOUT.
// providerSecret is a valid PROVIDER_SECRET (24 bytes), for tests only.
const providerSecret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"

func TestStopBudgetIsTheDeclaredShares(t *testing.T) {
	t.Parallel()
	background := 2*time.Second + time.Second + time.Second
	for name, tc := range map[string]struct {
		extra  []string
		budget time.Duration
	}{
		"http intake only, authentication off": {[]string{"AUTH_DISABLED=true"}, web.MaxRequestTimeout + 2*time.Second + background},
		"with the nats consumer, authentication on": {
			[]string{"NATS_URL=nats://127.0.0.1:1", "AUTH_JWKS_URL=http://127.0.0.1:1/jwks", "AUTH_ISSUER=i", "AUTH_AUDIENCE=a"},
			web.MaxRequestTimeout + 2*time.Second + 8*time.Second + background,
		},
		"with the provider relay": {
			[]string{"AUTH_DISABLED=true", "PROVIDER_URL=http://127.0.0.1:1/webhook", "PROVIDER_SECRET=" + providerSecret},
			web.MaxRequestTimeout + 2*time.Second + 8*time.Second + background,
		},
		"with the nats consumer and the provider relay, which stops within the consumer's share": {
			[]string{"NATS_URL=nats://127.0.0.1:1", "AUTH_DISABLED=true", "PROVIDER_URL=http://127.0.0.1:1/webhook", "PROVIDER_SECRET=" + providerSecret},
			web.MaxRequestTimeout + 2*time.Second + 8*time.Second + background,
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			vars := append([]string{
				"DATABASE_URL=sqlite:" + filepath.Join(t.TempDir(), "billing.db"), "EVENTS_TOKEN=t",
				"HTTP_ADDR=127.0.0.1:0", "HTTP_REQUEST_TIMEOUT=" + web.MaxRequestTimeout.String(),
			}, tc.extra...)
			environ := env(vars...)
			lookup := func(name string) (string, bool) { v, ok := environ[name]; return v, ok }
			cfg, err := config.LoadBilling(lookup)
			require.NoError(t, err)
			authCfg, err := envvar.LoadAuth(lookup)
			require.NoError(t, err)
			var (
				shares    []stopbudget.Share
				unbounded []string
				db        sqldb.DB
			)
			logger := slog.New(slog.NewTextHandler(io.Discard, nil))
			app := fx.New(append(service.Options(&shares, app(cfg, authCfg.Settings(), lookup).Options(logger, serveOptions(cfg))),
				stopbudget.Audit(func(hook string) { unbounded = append(unbounded, hook) }),
				fx.Populate(&db), fx.NopLogger)...)
			require.NoError(t, app.Err())
			t.Cleanup(func() { _ = db.(io.Closer).Close() })

			require.Empty(t, unbounded, "components that stop without a share of the stop budget")
			require.Equal(t, tc.budget, stopbudget.Total(shares))
			require.Less(t, stopbudget.Total(shares), service.StopGrace)
		})
	}
}

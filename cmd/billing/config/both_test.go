package config_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/cmd/billing/config"
	labelingconfig "github.com/acme/outboxpair/cmd/labeling/config"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/infra/web"
)

// The tests of what both services' loaders read alike, side by side: the
// one place that imports labeling's loader with billing's.

// TestConsoleSecureCookies: CONSOLE_SECURE_COOKIES (both services) says a
// proxy in front terminates TLS, so the server marks its cookies Secure; off
// by default, and a value that is not a boolean stops start-up with one line
// naming it.
func TestConsoleSecureCookies(t *testing.T) {
	t.Parallel()
	load := map[string]func(env.Lookup) (web.Config, error){
		"labeling": func(l env.Lookup) (web.Config, error) { c, err := labelingconfig.LoadLabeling(l); return c.HTTP, err },
		"billing":  func(l env.Lookup) (web.Config, error) { c, err := config.LoadBilling(l); return c.HTTP, err },
	}
	for service, load := range load {
		t.Run(service+": off by default, on with true", func(t *testing.T) {
			t.Parallel()
			c, err := load(lookup(base()))
			require.NoError(t, err)
			require.False(t, c.SecureCookies)
			for value, want := range map[string]bool{"true": true, "false": false, "1": true, "0": false} {
				kv := base()
				kv["CONSOLE_SECURE_COOKIES"] = value
				c, err := load(lookup(kv))
				require.NoError(t, err)
				require.Equal(t, want, c.SecureCookies, value)
			}
		})
		for _, value := range []string{"yes", "on", "https", " true"} {
			t.Run(service+": rejects "+value+" in one line naming CONSOLE_SECURE_COOKIES", func(t *testing.T) {
				t.Parallel()
				kv := base()
				kv["CONSOLE_SECURE_COOKIES"] = value
				_, err := load(lookup(kv))
				require.Error(t, err)
				require.True(t, strings.HasPrefix(err.Error(), "CONSOLE_SECURE_COOKIES: "), err.Error())
				require.NotContains(t, err.Error(), "\n")
			})
		}
	}
}

// The stop budget (contract section 5) must end before an orchestrator's
// SIGKILL for every HTTP_REQUEST_TIMEOUT that start-up accepts.
func TestStopBudgetFitsEveryAcceptedRequestTimeout(t *testing.T) {
	t.Parallel()
	loaders := map[string]func(env.Lookup) (web.Config, error){
		"labeling": func(l env.Lookup) (web.Config, error) { c, err := labelingconfig.LoadLabeling(l); return c.HTTP, err },
		"billing":  func(l env.Lookup) (web.Config, error) { c, err := config.LoadBilling(l); return c.HTTP, err },
	}
	background := map[string][]stopbudget.Share{
		"labeling": {outbox.StopShare, retention.StopShare, database.StopShare, telemetry.StopShare},
		"billing":  {stream.ConsumerStopShare, retention.StopShare, database.StopShare, telemetry.StopShare},
	}
	for svc, load := range loaders {
		t.Run(svc+": the largest accepted timeout stops under 30s, a larger one is refused naming it", func(t *testing.T) {
			t.Parallel()
			kv := base()
			kv["HTTP_REQUEST_TIMEOUT"] = web.MaxRequestTimeout.String()
			b, err := load(lookup(kv))
			require.NoError(t, err)
			require.Equal(t, web.MaxRequestTimeout, b.RequestTimeout)
			server := web.NewServer(web.Config{RequestTimeout: b.RequestTimeout}, echo.New(), slog.New(slog.DiscardHandler))
			// The shares of the service's components (cmd's tests hold the
			// apps to declaring exactly these).
			budget := stopbudget.Total(append([]stopbudget.Share{{Name: web.StopStep, Timeout: server.DrainTimeout()}},
				background[svc]...))
			require.Less(t, budget, service.StopGrace, "the stop budget at HTTP_REQUEST_TIMEOUT=%s", web.MaxRequestTimeout)
			require.LessOrEqual(t, service.StopGrace, 30*time.Second, "Kubernetes' default grace")

			kv["HTTP_REQUEST_TIMEOUT"] = (web.MaxRequestTimeout + time.Millisecond).String()
			_, err = load(lookup(kv))
			require.ErrorContains(t, err, "HTTP_REQUEST_TIMEOUT")
		})
	}
}

// TestRefusedURLsAreQuotedWithoutCredentials: a URL setting refused at start
// is quoted as scheme://host/path, without the userinfo and query an operator
// may have put a credential in.
func TestRefusedURLsAreQuotedWithoutCredentials(t *testing.T) {
	t.Parallel()
	const bad = "ftp://user:pw@host:21/in?token=s3cret#frag"
	for _, tc := range []struct {
		variable, value, want string
		load                  func(env.Lookup) error
	}{
		{"BILLING_URL", bad, `"ftp://host:21/in" is not an http(s) URL`, loadLabeling},
		{"CONSOLE_BILLING_URL", bad, `"ftp://host:21/in" is not an http(s) URL`, loadLabeling},
		{"CONSOLE_TRACE_URL", "http://user:pw@jaeger/trace?token=s3cret", `"http://jaeger/trace" does not contain {trace}`, loadLabeling},
		{"CONSOLE_LABELING_URL", bad, `"ftp://host:21/in" is not an http(s) URL`, loadBilling},
		{"PROVIDER_URL", bad, `"ftp://host:21/in" is not an http(s) URL`, loadBilling},
	} {
		t.Run(tc.variable+" is refused quoting its scheme, host and path only", func(t *testing.T) {
			t.Parallel()
			kv := base()
			kv[tc.variable] = tc.value
			err := tc.load(lookup(kv))
			require.EqualError(t, err, tc.variable+": "+tc.want)
		})
	}
}

func loadLabeling(l env.Lookup) error { _, err := labelingconfig.LoadLabeling(l); return err }
func loadBilling(l env.Lookup) error  { _, err := config.LoadBilling(l); return err }

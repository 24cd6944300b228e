package config_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/cmd/billing/config"
	labelingconfig "github.com/acme/outboxpair/cmd/labeling/config"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/infra/web"
)

func lookup(kv map[string]string) env.Lookup {
	return func(name string) (string, bool) {
		v, ok := kv[name]
		return v, ok
	}
}

func base() map[string]string {
	return map[string]string{
		"DATABASE_URL": "postgres://postgres@127.0.0.1:5432/labeling",
		"EVENTS_TOKEN": "secret",
	}
}

func TestLoadBilling(t *testing.T) {
	t.Parallel()

	t.Run("defaults fill every unset variable", func(t *testing.T) {
		t.Parallel()
		c, err := config.LoadBilling(lookup(base()))
		require.NoError(t, err)
		require.Equal(t, ":8081", c.HTTP.Addr)
		require.Equal(t, 720*time.Hour, c.Billing.ReceiptsRetention)
		require.Equal(t, time.Hour, c.Cleanup.Interval)
		require.Empty(t, c.NATS.URL, "no NATS consumer unless asked")
		require.Equal(t, 30*time.Second, c.NATS.AckWait)
		require.Equal(t, 100, c.Billing.ApplyGroupMax, "group apply is on by default")
		require.Equal(t, 1000, int(c.NATSIntake.MaxDeliveries))
		require.Empty(t, c.NATS.Creds)
	})

	t.Run("a group max of 1 turns group apply off", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["BILLING_APPLY_GROUP_MAX"] = "1"
		c, err := config.LoadBilling(lookup(kv))
		require.NoError(t, err)
		require.Equal(t, 1, c.Billing.ApplyGroupMax)
	})

	t.Run("reads the credentials file and the delivery bound", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["NATS_CREDS"] = credsFile(t)
		kv["NATS_MAX_DELIVERIES"] = "5"
		c, err := config.LoadBilling(lookup(kv))
		require.NoError(t, err)
		require.Equal(t, kv["NATS_CREDS"], c.NATS.Creds)
		require.Equal(t, 5, int(c.NATSIntake.MaxDeliveries))
	})

	t.Run("bounds billing_nats_failed by default and reads the bound", func(t *testing.T) {
		t.Parallel()
		c, err := config.LoadBilling(lookup(base()))
		require.NoError(t, err)
		require.Equal(t, inbox.DefaultNATSFailedMaxRows, int(c.NATSIntake.MaxFailedRows))
		require.Equal(t, inbox.DefaultNATSFailedMaxBytes, int(c.NATSIntake.MaxFailedBytes))
		kv := base()
		kv["NATS_FAILED_MAX_ROWS"], kv["NATS_FAILED_MAX_BYTES"] = "7", "4096"
		c, err = config.LoadBilling(lookup(kv))
		require.NoError(t, err)
		require.Equal(t, 7, int(c.NATSIntake.MaxFailedRows))
		require.Equal(t, 4096, int(c.NATSIntake.MaxFailedBytes))
	})

	for name, kv := range map[string][2]string{
		"a bad nats url":                      {"NATS_URL", "127.0.0.1:4222"},
		"a bad ack wait":                      {"NATS_ACK_WAIT", "soon"},
		"a zero ack wait":                     {"NATS_ACK_WAIT", "0s"},
		"a zero group max":                    {"BILLING_APPLY_GROUP_MAX", "0"},
		"a group max that is text":            {"BILLING_APPLY_GROUP_MAX", "on"},
		"a group max over 1000":               {"BILLING_APPLY_GROUP_MAX", "1001"},
		"a missing credentials file":          {"NATS_CREDS", "/nonexistent/nats.creds"},
		"a credentials directory":             {"NATS_CREDS", "/"},
		"zero deliveries":                     {"NATS_MAX_DELIVERIES", "0"},
		"zero failed records":                 {"NATS_FAILED_MAX_ROWS", "0"},
		"an absurd failed bytes bound":        {"NATS_FAILED_MAX_BYTES", "1099511627777"},
		"an absurd delivery bound":            {"NATS_MAX_DELIVERIES", "1000001"},
		"a non-numeric delivery bound":        {"NATS_MAX_DELIVERIES", "many"},
		"a blank token":                       {"EVENTS_TOKEN", "  "},
		"a blank previous token":              {"EVENTS_TOKEN_PREVIOUS", " \t"},
		"a previous token equal to the token": {"EVENTS_TOKEN_PREVIOUS", "secret"},
	} {
		t.Run("rejects "+name+" naming it", func(t *testing.T) {
			t.Parallel()
			env2 := base()
			env2[kv[0]] = kv[1]
			_, err := config.LoadBilling(lookup(env2))
			require.ErrorContains(t, err, kv[0])
		})
	}

	t.Run("reads the previous token of a rotation, unset by default", func(t *testing.T) {
		t.Parallel()
		c, err := config.LoadBilling(lookup(base()))
		require.NoError(t, err)
		require.Empty(t, c.Billing.EventsTokenPrevious)
		kv := base()
		kv["EVENTS_TOKEN_PREVIOUS"] = "old-secret"
		c, err = config.LoadBilling(lookup(kv))
		require.NoError(t, err)
		require.Equal(t, "old-secret", c.Billing.EventsTokenPrevious)
		require.Equal(t, "secret", c.Billing.EventsToken)
	})

	t.Run("billing's relay reads the OUTBOX_* variables with labeling's defaults and rules", func(t *testing.T) {
		t.Parallel()
		b, err := config.LoadBilling(lookup(base()))
		require.NoError(t, err)
		l, err := labelingconfig.LoadLabeling(lookup(base()))
		require.NoError(t, err)
		require.Equal(t, l.Relay, b.Relay)
		kv := base()
		kv["OUTBOX_MAX_ATTEMPTS"], kv["OUTBOX_PROCESSED_RETENTION"] = "3", "48h"
		b, err = config.LoadBilling(lookup(kv))
		require.NoError(t, err)
		require.Equal(t, 3, b.Relay.MaxAttempts)
		require.Equal(t, 48*time.Hour, b.Relay.ProcessedRetention)
		for k, v := range map[string]string{"OUTBOX_LEASE": "29s", "OUTBOX_CLAIM_SIZE": "1001", "OUTBOX_NOTIFY": "maybe", "OUTBOX_RETRY_MAX": "1s"} {
			kv := base()
			kv[k] = v
			_, err := config.LoadBilling(lookup(kv))
			require.ErrorContains(t, err, k)
		}
	})

	const secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
	t.Run("PROVIDER_URL unset: no provider, nothing required", func(t *testing.T) {
		t.Parallel()
		c, err := config.LoadBilling(lookup(base()))
		require.NoError(t, err)
		require.Empty(t, c.Provider.URL)
		require.Empty(t, c.Provider.Secrets)
	})

	t.Run("PROVIDER_URL and PROVIDER_SECRET, several secrets during a rotation", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["PROVIDER_URL"], kv["PROVIDER_SECRET"] = "http://provider:8082/webhook", secret+" "+secret
		c, err := config.LoadBilling(lookup(kv))
		require.NoError(t, err)
		require.Equal(t, "http://provider:8082/webhook", c.Provider.URL)
		require.Equal(t, []string{secret, secret}, c.Provider.Secrets)
	})

	for name, tc := range map[string]struct{ url, secret, variable string }{
		"a provider url without scheme":    {"provider:8082/webhook", secret, "PROVIDER_URL"},
		"a relative provider url":          {"/webhook", secret, "PROVIDER_URL"},
		"a provider url without a secret":  {"http://provider:8082/webhook", "", "PROVIDER_SECRET"},
		"a secret without whsec_":          {"http://provider:8082/webhook", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "PROVIDER_SECRET"},
		"a secret too short":               {"http://provider:8082/webhook", "whsec_c2hvcnQ=", "PROVIDER_SECRET"},
		"a bad secret without a url":       {"", "whsec_!!!notbase64", "PROVIDER_SECRET"},
		"a rotation whose second is wrong": {"http://provider:8082/webhook", secret + " whsec_c2hvcnQ=", "PROVIDER_SECRET"},
	} {
		t.Run("rejects "+name+" in one line naming "+tc.variable+", never quoting the secret", func(t *testing.T) {
			t.Parallel()
			kv := base()
			kv["PROVIDER_URL"], kv["PROVIDER_SECRET"] = tc.url, tc.secret
			_, err := config.LoadBilling(lookup(kv))
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), tc.variable+": "), err.Error())
			require.NotContains(t, err.Error(), "\n")
			for _, s := range strings.Fields(tc.secret) {
				require.NotContains(t, err.Error(), strings.TrimPrefix(s, "whsec_"))
			}
		})
	}

	t.Run("an unset DATABASE_URL is the service's SQLite file", func(t *testing.T) {
		t.Parallel()
		c, err := env.LoadCommand(lookup(map[string]string{}), config.DefaultDatabase)
		require.NoError(t, err)
		require.Equal(t, "sqlite:data/billing.db", c.DatabaseURL)
		require.True(t, c.DatabaseDefaulted)
		b, err := config.LoadBilling(lookup(map[string]string{"EVENTS_TOKEN": "t"}))
		require.NoError(t, err)
		require.Equal(t, "sqlite:data/billing.db", b.DatabaseURL)
		require.True(t, b.DatabaseDefaulted)
	})

	t.Run("rejects a bad retention naming it", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["RECEIPTS_RETENTION"] = "30d"
		_, err := config.LoadBilling(lookup(kv))
		require.ErrorContains(t, err, "RECEIPTS_RETENTION")
	})
}

// TestConsoleSecureCookies: CONSOLE_SECURE_COOKIES (both services; labeling's loader has the same test) says a
// proxy in front terminates TLS, so the server marks its cookies Secure; off
// by default, and a value that is not a boolean stops start-up with one line
// naming it.
func TestConsoleSecureCookies(t *testing.T) {
	t.Parallel()
	load := map[string]func(env.Lookup) (web.Config, error){
		"billing": func(l env.Lookup) (web.Config, error) { c, err := config.LoadBilling(l); return c.HTTP, err },
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

// credsFile is a file that exists; its content is the stream package's to check.
func credsFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.creds")
	require.NoError(t, os.WriteFile(path, []byte("creds"), 0o600))
	return path
}

// The stop budget (contract section 5) must end before an orchestrator's
// SIGKILL for every HTTP_REQUEST_TIMEOUT that start-up accepts.
func TestStopBudgetFitsEveryAcceptedRequestTimeout(t *testing.T) {
	t.Parallel()
	loaders := map[string]func(env.Lookup) (web.Config, error){
		"billing": func(l env.Lookup) (web.Config, error) { c, err := config.LoadBilling(l); return c.HTTP, err },
	}
	background := map[string][]stopbudget.Share{
		"billing": {stream.ConsumerStopShare, retention.StopShare, database.StopShare, telemetry.StopShare},
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

func loadBilling(l env.Lookup) error { _, err := config.LoadBilling(l); return err }

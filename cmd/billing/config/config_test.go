package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/cmd/billing/config"
	labelingconfig "github.com/acme/outboxpair/cmd/labeling/config"
	"github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/inbox"
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

// credsFile is a file that exists; its content is the stream package's to check.
func credsFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.creds")
	require.NoError(t, os.WriteFile(path, []byte("creds"), 0o600))
	return path
}

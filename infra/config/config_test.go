package config_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/config"
)

func env(kv map[string]string) config.Lookup {
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

func TestLoadLabeling(t *testing.T) {
	t.Parallel()

	t.Run("defaults fill every unset variable", func(t *testing.T) {
		t.Parallel()
		c, err := config.LoadLabeling(env(base()))
		require.NoError(t, err)
		require.Equal(t, ":8080", c.HTTPAddr)
		require.Equal(t, "http://localhost:8081", c.BillingURL)
		require.Equal(t, time.Second, c.PollInterval)
		require.Equal(t, 10, c.ClaimSize)
		require.Equal(t, 30*time.Second, c.HandlerTimeout)
		require.Equal(t, 5*time.Minute, c.Lease)
		require.Equal(t, 10, c.MaxAttempts)
		require.Equal(t, 5*time.Second, c.RetryBase)
		require.Equal(t, 15*time.Minute, c.RetryMax)
		require.Equal(t, 168*time.Hour, c.ProcessedRetention)
		require.True(t, c.OutboxNotify)
		require.Equal(t, time.Hour, c.CleanupInterval)
	})

	t.Run("OUTBOX_NOTIFY=false turns the LISTEN off", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["OUTBOX_NOTIFY"] = "false"
		c, err := config.LoadLabeling(env(kv))
		require.NoError(t, err)
		require.False(t, c.OutboxNotify)
	})

	bad := []struct {
		name, variable, value string
	}{
		{"missing database url", "DATABASE_URL", ""},
		{"malformed database url", "DATABASE_URL", "postgres://%zz"},
		{"missing token", "EVENTS_TOKEN", ""},
		{"billing url without scheme", "BILLING_URL", "billing:8081"},
		{"duration without unit", "OUTBOX_POLL_INTERVAL", "5"},
		{"negative duration", "OUTBOX_HANDLER_TIMEOUT", "-1s"},
		{"zero claim size", "OUTBOX_CLAIM_SIZE", "0"},
		{"non-numeric attempts", "OUTBOX_MAX_ATTEMPTS", "ten"},
		{"lease shorter than claim x timeout", "OUTBOX_LEASE", "4m"},
		{"retry max under base", "OUTBOX_RETRY_MAX", "1s"},
		{"bad retention", "OUTBOX_PROCESSED_RETENTION", "a week"},
		{"non-boolean notify", "OUTBOX_NOTIFY", "maybe"},
		{"bad cleanup interval", "CLEANUP_INTERVAL", "0s"},
	}
	for _, tc := range bad {
		t.Run("rejects "+tc.name+" naming "+tc.variable, func(t *testing.T) {
			t.Parallel()
			kv := base()
			kv[tc.variable] = tc.value
			_, err := config.LoadLabeling(env(kv))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.variable)
		})
	}

	t.Run("database url errors never echo the password", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["DATABASE_URL"] = "postgres://u:hunter2@host:notaport/db"
		_, err := config.LoadLabeling(env(kv))
		require.Error(t, err)
		require.NotContains(t, err.Error(), "hunter2")
	})
}

func TestLoadBilling(t *testing.T) {
	t.Parallel()

	t.Run("defaults fill every unset variable", func(t *testing.T) {
		t.Parallel()
		c, err := config.LoadBilling(env(base()))
		require.NoError(t, err)
		require.Equal(t, ":8081", c.HTTPAddr)
		require.Equal(t, 720*time.Hour, c.ReceiptsRetention)
		require.Equal(t, time.Hour, c.CleanupInterval)
	})

	t.Run("rejects a bad retention naming it", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["RECEIPTS_RETENTION"] = "30d"
		_, err := config.LoadBilling(env(kv))
		require.ErrorContains(t, err, "RECEIPTS_RETENTION")
	})
}

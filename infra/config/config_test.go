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
		require.Equal(t, time.Hour, c.CleanupInterval)
		require.Equal(t, config.TransportHTTP, c.EventsTransport, "HTTP stays the default")
		require.Empty(t, c.NATSURL)
		require.Equal(t, 1, c.NATSReplicas)
		require.Equal(t, 30*time.Minute, c.NATSDuplicateWindow)
		require.Greater(t, c.NATSDuplicateWindow, c.Lease+c.RetryMax+c.HandlerTimeout,
			"the default window covers a lease, the longest retry delay and a handler timeout")
	})

	t.Run("nats transport with a server list", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["EVENTS_TRANSPORT"] = "nats"
		kv["NATS_URL"] = "nats://127.0.0.1:4222,nats://127.0.0.1:4223"
		kv["NATS_REPLICAS"] = "3"
		kv["NATS_DUPLICATE_WINDOW"] = "2h"
		c, err := config.LoadLabeling(env(kv))
		require.NoError(t, err)
		require.Equal(t, config.TransportNATS, c.EventsTransport)
		require.Equal(t, kv["NATS_URL"], c.NATSURL)
		require.Equal(t, 3, c.NATSReplicas)
		require.Equal(t, 2*time.Hour, c.NATSDuplicateWindow)
	})

	t.Run("rejects nats without NATS_URL naming it", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["EVENTS_TRANSPORT"] = "nats"
		_, err := config.LoadLabeling(env(kv))
		require.ErrorContains(t, err, "NATS_URL")
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
		{"bad cleanup interval", "CLEANUP_INTERVAL", "0s"},
		{"unknown transport", "EVENTS_TRANSPORT", "kafka"},
		{"nats url with another scheme", "NATS_URL", "http://127.0.0.1:4222"},
		{"nats url list with a bad entry", "NATS_URL", "nats://a:4222,b:4222"},
		{"zero replicas", "NATS_REPLICAS", "0"},
		{"more replicas than JetStream allows", "NATS_REPLICAS", "7"},
		{"duplicate window without unit", "NATS_DUPLICATE_WINDOW", "30"},
		{"duplicate window longer than the stream keeps messages", "NATS_DUPLICATE_WINDOW", "200h"},
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
		require.Empty(t, c.NATSURL, "no NATS consumer unless asked")
		require.Equal(t, 30*time.Second, c.NATSAckWait)
	})

	for name, kv := range map[string][2]string{
		"a bad nats url":  {"NATS_URL", "127.0.0.1:4222"},
		"a bad ack wait":  {"NATS_ACK_WAIT", "soon"},
		"a zero ack wait": {"NATS_ACK_WAIT", "0s"},
	} {
		t.Run("rejects "+name+" naming it", func(t *testing.T) {
			t.Parallel()
			env2 := base()
			env2[kv[0]] = kv[1]
			_, err := config.LoadBilling(env(env2))
			require.ErrorContains(t, err, kv[0])
		})
	}

	t.Run("rejects a bad retention naming it", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["RECEIPTS_RETENTION"] = "30d"
		_, err := config.LoadBilling(env(kv))
		require.ErrorContains(t, err, "RECEIPTS_RETENTION")
	})
}

package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/cmd/labeling/config"
	"github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/wire"
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

func TestLoadLabeling(t *testing.T) {
	t.Parallel()

	t.Run("defaults fill every unset variable", func(t *testing.T) {
		t.Parallel()
		c, err := config.LoadLabeling(lookup(base()))
		require.NoError(t, err)
		require.Equal(t, ":8080", c.HTTP.Addr)
		require.Equal(t, "http://localhost:8081", c.BillingURL)
		require.Equal(t, time.Second, c.Relay.PollInterval)
		require.Equal(t, 40, c.Relay.ClaimSize)
		require.Equal(t, 30*time.Second, c.Relay.HandlerTimeout)
		require.Equal(t, 5*time.Minute, c.Relay.Lease)
		require.Equal(t, 10, c.Relay.MaxAttempts)
		require.Equal(t, 5*time.Second, c.Relay.RetryBase)
		require.Equal(t, 15*time.Minute, c.Relay.RetryMax)
		require.Equal(t, 168*time.Hour, c.Relay.ProcessedRetention)
		require.True(t, c.Relay.Notify)
		require.Equal(t, time.Hour, c.Cleanup.Interval)
		require.Equal(t, config.TransportHTTP, c.EventsTransport, "HTTP stays the default")
		require.Empty(t, c.NATS.URL)
		require.Equal(t, 1, c.NATS.Replicas)
		require.Equal(t, 30*time.Minute, c.NATS.DuplicateWindow)
		require.Greater(t, c.NATS.DuplicateWindow, c.Relay.Lease+c.Relay.RetryMax+c.Relay.HandlerTimeout,
			"the default window covers a lease, the longest retry delay and a handler timeout")
		require.Equal(t, []string{"billing"}, c.NATS.Consumers, "the stream keeps every message for billing")
		require.Empty(t, c.NATS.ConsumerTypes, "each durable takes every type")
		require.Empty(t, c.NATS.Creds)
	})

	t.Run("NATS_CONSUMER_<NAME>_TYPES gives the types of each durable of NATS_CONSUMERS named, looked up by its name", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["NATS_CONSUMERS"] = "billing,ledger,e2e-audit"
		kv["NATS_CONSUMER_LEDGER_TYPES"] = "RuleActivated"
		kv["NATS_CONSUMER_E2E-AUDIT_TYPES"] = " RuleDeactivated , RuleActivated"
		kv["NATS_CONSUMER_OTHER_TYPES"] = "Nope"  // not a durable of NATS_CONSUMERS: never read
		kv["NATS_CONSUMER_ledger_TYPES"] = "Nope" // the name in capitals only
		c, err := config.LoadLabeling(lookup(kv))
		require.NoError(t, err)
		require.Equal(t, map[string][]string{"ledger": {"RuleActivated"}, "e2e-audit": {"RuleDeactivated", "RuleActivated"}},
			c.NATS.ConsumerTypes, "billing, unset, takes every type")
	})

	t.Run("rejects types for two durables whose names differ only in case, naming the variable", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["NATS_CONSUMERS"] = "audit,AUDIT"
		kv["NATS_CONSUMER_AUDIT_TYPES"] = "RuleActivated"
		_, err := config.LoadLabeling(lookup(kv))
		require.EqualError(t, err, "NATS_CONSUMER_AUDIT_TYPES: names both audit and AUDIT of NATS_CONSUMERS; rename one of them")
	})

	for _, tc := range []struct{ name, value, says string }{
		{"a type labeling does not publish", "RuleActivated,RuleRenamed", `"RuleRenamed" is not an event type labeling publishes (RuleActivated, RuleDeactivated)`},
		{"a blank list", " ", "not a list of event types"},
		{"an empty type in the list", "RuleActivated,,RuleDeactivated", "not a list of event types"},
		{"a type twice", "RuleActivated,RuleActivated", "listed twice"},
	} {
		t.Run("rejects "+tc.name+" in NATS_CONSUMER_<NAME>_TYPES with one line naming the variable", func(t *testing.T) {
			t.Parallel()
			kv := base()
			kv["NATS_CONSUMERS"] = "billing,ledger"
			kv["NATS_CONSUMER_LEDGER_TYPES"] = tc.value
			_, err := config.LoadLabeling(lookup(kv))
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), "NATS_CONSUMER_LEDGER_TYPES: "), err.Error())
			require.Contains(t, err.Error(), tc.says)
			require.NotContains(t, err.Error(), "\n")
		})
	}

	t.Run("nats transport with a server list", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["EVENTS_TRANSPORT"] = "nats"
		kv["NATS_URL"] = "nats://127.0.0.1:4222,nats://127.0.0.1:4223"
		kv["NATS_REPLICAS"] = "3"
		kv["NATS_DUPLICATE_WINDOW"] = "2h"
		kv["NATS_CONSUMERS"] = "billing, e2e-audit,audit_2"
		kv["NATS_CREDS"] = credsFile(t)
		c, err := config.LoadLabeling(lookup(kv))
		require.NoError(t, err)
		require.Equal(t, config.TransportNATS, c.EventsTransport)
		require.Equal(t, kv["NATS_URL"], c.NATS.URL)
		require.Equal(t, 3, c.NATS.Replicas)
		require.Equal(t, 2*time.Hour, c.NATS.DuplicateWindow)
		require.Equal(t, []string{"billing", "e2e-audit", "audit_2"}, c.NATS.Consumers)
		require.Equal(t, kv["NATS_CREDS"], c.NATS.Creds)
	})

	t.Run("EVENTS_FORMAT is the envelope by default and cloudevents when set, on both transports", func(t *testing.T) {
		t.Parallel()
		c, err := config.LoadLabeling(lookup(base()))
		require.NoError(t, err)
		require.Equal(t, wire.FormatEnvelope, c.EventsFormat)
		require.Equal(t, wire.FormatEnvelope, c.NATS.Format)
		kv := base()
		kv["EVENTS_FORMAT"] = "cloudevents"
		c, err = config.LoadLabeling(lookup(kv))
		require.NoError(t, err)
		require.Equal(t, wire.FormatCloudEvents, c.EventsFormat)
		require.Equal(t, wire.FormatCloudEvents, c.NATS.Format)
	})

	t.Run("rejects nats without NATS_URL naming it", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["EVENTS_TRANSPORT"] = "nats"
		_, err := config.LoadLabeling(lookup(kv))
		require.ErrorContains(t, err, "NATS_URL")
	})

	t.Run("OUTBOX_NOTIFY=false turns the LISTEN off", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["OUTBOX_NOTIFY"] = "false"
		c, err := config.LoadLabeling(lookup(kv))
		require.NoError(t, err)
		require.False(t, c.Relay.Notify)
	})

	bad := []struct {
		name, variable, value string
	}{
		{"sqlite url without a path", "DATABASE_URL", "sqlite:"},
		{"malformed database url", "DATABASE_URL", "postgres://%zz"},
		{"missing token", "EVENTS_TOKEN", ""},
		{"a blank token", "EVENTS_TOKEN", " "},
		{"a whitespace-only token", "EVENTS_TOKEN", "\t \n"},
		{"billing url without scheme", "BILLING_URL", "billing:8081"},
		{"console trace url without {trace}", "CONSOLE_TRACE_URL", "https://traces.example/t/"},
		{"console billing url without scheme", "CONSOLE_BILLING_URL", "billing:8081/console/"},
		{"duration without unit", "OUTBOX_POLL_INTERVAL", "5"},
		{"negative duration", "OUTBOX_HANDLER_TIMEOUT", "-1s"},
		{"zero claim size", "OUTBOX_CLAIM_SIZE", "0"},
		{"non-numeric attempts", "OUTBOX_MAX_ATTEMPTS", "ten"},
		{"lease shorter than the handler timeout", "OUTBOX_LEASE", "29s"},
		{"a lease under a second", "OUTBOX_LEASE", "999ms"},
		{"retry max under base", "OUTBOX_RETRY_MAX", "1s"},
		{"bad retention", "OUTBOX_PROCESSED_RETENTION", "a week"},
		{"non-boolean notify", "OUTBOX_NOTIFY", "maybe"},
		{"bad cleanup interval", "CLEANUP_INTERVAL", "0s"},
		{"unknown transport", "EVENTS_TRANSPORT", "kafka"},
		{"unknown event format", "EVENTS_FORMAT", "avro"},
		{"an event format in capitals", "EVENTS_FORMAT", "CloudEvents"},
		{"nats url with another scheme", "NATS_URL", "http://127.0.0.1:4222"},
		{"nats url list with a bad entry", "NATS_URL", "nats://a:4222,b:4222"},
		{"zero replicas", "NATS_REPLICAS", "0"},
		{"more replicas than JetStream allows", "NATS_REPLICAS", "7"},
		{"duplicate window without unit", "NATS_DUPLICATE_WINDOW", "30"},
		{"duplicate window longer than the stream keeps messages", "NATS_DUPLICATE_WINDOW", "200h"},
		{"a consumer name with a dot", "NATS_CONSUMERS", "billing,a.b"},
		{"an empty consumer name in the list", "NATS_CONSUMERS", "billing,,audit"},
		{"a credentials file that is not there", "NATS_CREDS", "/nonexistent/nats.creds"},
		{"a claim size whose product with the timeout overflows", "OUTBOX_CLAIM_SIZE", "307445735"},
		{"an absurd claim size", "OUTBOX_CLAIM_SIZE", "1001"},
		{"an absurd attempt count", "OUTBOX_MAX_ATTEMPTS", "1000000"},
		{"an absurd handler timeout", "OUTBOX_HANDLER_TIMEOUT", "2562047h"},
		{"a request timeout over its maximum", "HTTP_REQUEST_TIMEOUT", "1h"},
		{"a bad statement timeout", "DB_STATEMENT_TIMEOUT", "5"},
		{"a bad lock timeout", "DB_LOCK_TIMEOUT", "-1s"},
	}
	// What a message must say besides the variable: a value over its bound is
	// refused for the bound, not for what it breaks further on (the lease rule).
	says := map[string]string{
		"OUTBOX_CLAIM_SIZE=1001":      "maximum of 1000",
		"OUTBOX_MAX_ATTEMPTS=1000000": "maximum",
		"OUTBOX_LEASE=999ms":          "minimum of 1s",
	}
	for _, tc := range bad {
		t.Run("rejects "+tc.name+" naming "+tc.variable, func(t *testing.T) {
			t.Parallel()
			kv := base()
			kv[tc.variable] = tc.value
			_, err := config.LoadLabeling(lookup(kv))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.variable)
			require.Contains(t, err.Error(), says[tc.variable+"="+tc.value])
		})
	}

	t.Run("the lease rule holds at the largest settings", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["OUTBOX_CLAIM_SIZE"] = "1000"
		kv["OUTBOX_WORKERS"] = "1000"
		kv["OUTBOX_HANDLER_TIMEOUT"] = "24h"
		kv["OUTBOX_LEASE"] = "23h59m59s"
		_, err := config.LoadLabeling(lookup(kv))
		require.ErrorContains(t, err, "OUTBOX_LEASE")
		require.ErrorContains(t, err, "OUTBOX_HANDLER_TIMEOUT")
		kv["OUTBOX_LEASE"] = "24h"
		_, err = config.LoadLabeling(lookup(kv))
		require.NoError(t, err)
	})

	// Every row of a claim starts at once (a claim takes no more rows than
	// there are free workers), so the lease covers one handler timeout
	// whatever the claim size: claim size × timeout may exceed it.
	t.Run("accepts claims of any size whose rows each fit the lease", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct{ claim, workers, timeout, lease string }{
			{"100", "40", "30s", "5m"},
			{"1000", "1", "30s", "30s"},
			{"40", "1000", "5m", "5m"},
		} {
			kv := base()
			kv["OUTBOX_CLAIM_SIZE"], kv["OUTBOX_WORKERS"] = tc.claim, tc.workers
			kv["OUTBOX_HANDLER_TIMEOUT"], kv["OUTBOX_LEASE"] = tc.timeout, tc.lease
			_, err := config.LoadLabeling(lookup(kv))
			require.NoError(t, err, "%+v", tc)
		}
	})

	t.Run("the bounds have defaults", func(t *testing.T) {
		t.Parallel()
		c, err := config.LoadLabeling(lookup(base()))
		require.NoError(t, err)
		require.Equal(t, 8*time.Second, c.HTTP.RequestTimeout)
		require.Equal(t, sqldb.Bounds{StatementTimeout: 5 * time.Second, LockTimeout: 2 * time.Second}, c.Bounds)
	})

	t.Run("an operator command needs no EVENTS_TOKEN", func(t *testing.T) {
		t.Parallel()
		c, err := env.LoadCommand(lookup(map[string]string{"DATABASE_URL": "postgres://h/db"}), config.DefaultDatabase)
		require.NoError(t, err)
		require.Equal(t, "postgres://h/db", c.DatabaseURL)
		require.False(t, c.DatabaseDefaulted)
	})

	t.Run("an unset DATABASE_URL is the service's SQLite file", func(t *testing.T) {
		t.Parallel()
		c, err := env.LoadCommand(lookup(map[string]string{}), config.DefaultDatabase)
		require.NoError(t, err)
		require.Equal(t, "sqlite:data/labeling.db", c.DatabaseURL)
		require.True(t, c.DatabaseDefaulted)
		l, err := config.LoadLabeling(lookup(map[string]string{"EVENTS_TOKEN": "t"}))
		require.NoError(t, err)
		require.Equal(t, "sqlite:data/labeling.db", l.DatabaseURL)
		require.True(t, l.DatabaseDefaulted)
	})

	t.Run("sqlite: without a path is refused, naming DATABASE_URL", func(t *testing.T) {
		t.Parallel()
		_, err := env.LoadCommand(lookup(map[string]string{"DATABASE_URL": "sqlite:"}), config.DefaultDatabase)
		require.ErrorContains(t, err, "DATABASE_URL")
		c, err := env.LoadCommand(lookup(map[string]string{"DATABASE_URL": "sqlite:/var/lib/outboxpair/labeling.db"}), config.DefaultDatabase)
		require.NoError(t, err)
		require.Equal(t, "sqlite:/var/lib/outboxpair/labeling.db", c.DatabaseURL)
	})

	t.Run("sqlite: with URI syntax or an in-memory target is refused, naming DATABASE_URL", func(t *testing.T) {
		t.Parallel()
		for _, v := range []string{
			"sqlite:data/l.db?_pragma=synchronous(OFF)",
			"sqlite:data/l.db?_pragma=journal_mode(DELETE)",
			"sqlite:data/l.db#x",
			"sqlite:data/l%3Fdb",
			"sqlite::memory:",
			"sqlite:file::memory:",
			"sqlite:file:data/l.db?mode=memory",
			"sqlite:file:data/l.db",
		} {
			_, err := env.LoadCommand(lookup(map[string]string{"DATABASE_URL": v}), config.DefaultDatabase)
			require.Error(t, err, v)
			require.True(t, strings.HasPrefix(err.Error(), "DATABASE_URL: "), err.Error())
			require.NotContains(t, err.Error(), "\n")
		}
	})

	t.Run("database url errors never echo the password", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["DATABASE_URL"] = "postgres://u:hunter2@host:notaport/db"
		_, err := config.LoadLabeling(lookup(kv))
		require.Error(t, err)
		require.NotContains(t, err.Error(), "hunter2")
	})
}

// credsFile is a file that exists; its content is the stream package's to check.
func credsFile(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "nats.creds")
	require.NoError(t, os.WriteFile(path, []byte("creds"), 0o600))
	return path
}

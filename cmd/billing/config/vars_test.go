package config_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/cmd/billing/config"
	"github.com/acme/outboxpair/infra/env"
)

// provider is a valid environment with a provider, so that PROVIDER_SECRET
// is read.
func provider() map[string]string {
	return map[string]string{
		"DATABASE_URL": "postgres://h/db", "EVENTS_TOKEN": "t",
		"PROVIDER_URL": "http://provider:8082/webhook", "PROVIDER_SECRET": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
	}
}

// Every variable billing's settings look up (serve's loader, the operator
// commands', nats replay's and healthcheck's) is declared in env.Vars for
// billing and ReadBySettings, and every one declared is looked up: the
// usage text, built from env.Vars, names all billing reads and nothing else.
func TestVarsAreWhatBillingLooksUp(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, e := range []map[string]string{{}, provider()} {
		l := func(name string) (string, bool) {
			seen[env.Declared(name)] = true
			v, ok := e[name]
			return v, ok
		}
		_, _ = config.LoadBilling(l)
		_, _ = config.LoadReplay(l)
		_, _ = env.LoadCommand(l, config.DefaultDatabase)
		env.LoadHTTPAddr(l, config.DefaultAddr)
	}
	require.ElementsMatch(t, env.BillingService.NamesReadBy(env.ReadBySettings), slices.Sorted(maps.Keys(seen)))
}

// Each variable billing reads, set alone to a value it refuses in an
// otherwise valid environment, stops start-up with one line that names that
// variable and no other first: a message can name the wrong variable only
// if this test is changed.
func TestEachRefusalNamesItsVariable(t *testing.T) {
	t.Parallel()
	refused := map[string][]string{
		"DATABASE_URL":               {"sqlite:", "sqlite::memory:", "mysql://h/db"},
		"EVENTS_TOKEN":               {"", " "},
		"CONSOLE_SECURE_COOKIES":     {"yes"},
		"OUTBOX_POLL_INTERVAL":       {"5", "0s", "25h"},
		"OUTBOX_CLAIM_SIZE":          {"0", "ten", "1001"},
		"OUTBOX_WORKERS":             {"0", "1001"},
		"OUTBOX_HANDLER_TIMEOUT":     {"5", "-1s", "25h"},
		"OUTBOX_LEASE":               {"5", "999ms", "29s"},
		"OUTBOX_MAX_ATTEMPTS":        {"0", "1001"},
		"OUTBOX_RETRY_BASE":          {"5", "0s", "25h"},
		"OUTBOX_RETRY_MAX":           {"5", "1s"},
		"OUTBOX_PROCESSED_RETENTION": {"a week", "-1s"},
		"OUTBOX_NOTIFY":              {"maybe"},
		"EVENTS_TOKEN_PREVIOUS":      {" ", "t"},
		"RECEIPTS_RETENTION":         {"30d", "0s", "1000000h"},
		"CONSOLE_LABELING_URL":       {"labeling:8080"},
		"BILLING_APPLY_GROUP_MAX":    {"0", "on", "1001"},
		"PROVIDER_URL":               {"provider:8082/webhook", "/webhook"},
		"PROVIDER_SECRET":            {"", "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "whsec_c2hvcnQ="},
		"CLEANUP_INTERVAL":           {"0s", "1000000h"},
		"HTTP_REQUEST_TIMEOUT":       {"5", "16s"},
		"DB_STATEMENT_TIMEOUT":       {"5", "2h"},
		"DB_LOCK_TIMEOUT":            {"-1s", "2h"},
		"NATS_URL":                   {"127.0.0.1:4222", "nats://a:1,b:2"},
		"NATS_CREDS":                 {"/nonexistent/nats.creds", "/"},
		"NATS_ACK_WAIT":              {"soon", "0s", "25h"},
		"NATS_MAX_DELIVERIES":        {"0", "many", "1000001"},
		"NATS_FAILED_MAX_ROWS":       {"0", "100000001"},
		"NATS_FAILED_MAX_BYTES":      {"0", "1099511627777"},
	}
	// HTTP_ADDR is any address net.Listen takes, checked when serve listens.
	accepted := []string{"HTTP_ADDR"}
	for _, name := range env.BillingService.NamesReadBy(env.ReadBySettings) {
		if slices.Contains(accepted, name) {
			continue
		}
		require.Contains(t, refused, name, "give it values billing refuses")
		for _, value := range refused[name] {
			kv := provider()
			kv[name] = value
			_, err := config.LoadBilling(lookup(kv))
			require.Error(t, err, "%s=%q", name, value)
			require.True(t, strings.HasPrefix(err.Error(), name+": "), "%s=%q: %s", name, value, err)
			require.NotContains(t, err.Error(), "\n")
		}
	}
}

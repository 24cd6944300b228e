package config_test

import (
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/cmd/labeling/config"
	"github.com/acme/outboxpair/infra/env"
)

// fanout is a valid environment with one further subscriber, so that the
// SUBSCRIBER_<NAME>_* variables are read.
func fanout() map[string]string {
	return map[string]string{
		"DATABASE_URL": "postgres://h/db", "EVENTS_TOKEN": "t", "SUBSCRIBERS": "ledger",
		"SUBSCRIBER_LEDGER_URL": "http://ledger:8082", "SUBSCRIBER_LEDGER_TOKEN": "l", "SUBSCRIBER_LEDGER_TYPES": "RuleActivated",
	}
}

// Every variable labeling's settings look up (serve's loader, the operator
// commands' and healthcheck's) is declared in env.Vars for labeling and
// ReadBySettings, and every one declared is looked up: the usage text, built
// from env.Vars, names all labeling reads and nothing else.
func TestVarsAreWhatLabelingLooksUp(t *testing.T) {
	t.Parallel()
	nats := map[string]string{
		"DATABASE_URL": "postgres://h/db", "EVENTS_TOKEN": "t",
		"EVENTS_TRANSPORT": "nats", "NATS_URL": "nats://h:4222",
	}
	seen := map[string]bool{}
	for _, e := range []map[string]string{{}, nats, fanout()} {
		l := func(name string) (string, bool) {
			seen[env.Declared(name)] = true // NATS_CONSUMER_BILLING_TYPES is NATS_CONSUMER_<NAME>_TYPES
			v, ok := e[name]
			return v, ok
		}
		_, _ = config.LoadLabeling(l)
		_, _ = env.LoadCommand(l, config.DefaultDatabase)
		env.LoadHTTPAddr(l, config.DefaultAddr)
	}
	require.ElementsMatch(t, env.LabelingService.NamesReadBy(env.ReadBySettings), slices.Sorted(maps.Keys(seen)))
}

// Each variable labeling reads, set alone to a value it refuses in an
// otherwise valid environment, stops start-up with one line that names that
// variable and no other first: a message can name the wrong variable only
// if this test is changed.
func TestEachRefusalNamesItsVariable(t *testing.T) {
	t.Parallel()
	refused := map[string][]string{
		"DATABASE_URL":                {"sqlite:", "sqlite::memory:", "mysql://h/db"},
		"EVENTS_TOKEN":                {"", " "},
		"BILLING_URL":                 {"billing:8081", "/events"},
		"CONSOLE_BILLING_URL":         {"billing:8081"},
		"CONSOLE_TRACE_URL":           {"http://jaeger/trace", "jaeger"},
		"SUBSCRIBERS":                 {"Ledger", "ledger,ledger", "billing"},
		"SUBSCRIBER_LEDGER_URL":       {"", "ledger:8082"},
		"SUBSCRIBER_LEDGER_TOKEN":     {"", " ", "t"},
		"SUBSCRIBER_LEDGER_TYPES":     {"", "RuleRenamed", "RuleActivated,RuleActivated"},
		"CONSOLE_SECURE_COOKIES":      {"yes"},
		"OUTBOX_POLL_INTERVAL":        {"5", "0s", "25h"},
		"OUTBOX_CLAIM_SIZE":           {"0", "ten", "1001"},
		"OUTBOX_WORKERS":              {"0", "1001"},
		"OUTBOX_HANDLER_TIMEOUT":      {"5", "-1s", "25h"},
		"OUTBOX_LEASE":                {"5", "999ms", "29s"},
		"OUTBOX_MAX_ATTEMPTS":         {"0", "1001"},
		"OUTBOX_RETRY_BASE":           {"5", "0s", "25h"},
		"OUTBOX_RETRY_MAX":            {"5", "1s"},
		"OUTBOX_PROCESSED_RETENTION":  {"a week", "-1s"},
		"OUTBOX_NOTIFY":               {"maybe"},
		"CLEANUP_INTERVAL":            {"0s", "1000000h"},
		"HTTP_REQUEST_TIMEOUT":        {"5", "16s"},
		"DB_STATEMENT_TIMEOUT":        {"5", "2h"},
		"DB_LOCK_TIMEOUT":             {"-1s", "2h"},
		"EVENTS_TRANSPORT":            {"kafka", "NATS"},
		"EVENTS_FORMAT":               {"avro", "CloudEvents"},
		"NATS_URL":                    {"http://h:4222", "nats://a:1,b:2"},
		"NATS_CREDS":                  {"/nonexistent/nats.creds"},
		"NATS_REPLICAS":               {"0", "7", "1001"},
		"NATS_DUPLICATE_WINDOW":       {"30", "200h"},
		"NATS_CONSUMERS":              {"billing,a.b", "billing,,audit"},
		"NATS_CONSUMER_BILLING_TYPES": {"RuleRenamed", " ", "RuleActivated,RuleActivated"},
	}
	// HTTP_ADDR is any address net.Listen takes, checked when serve listens.
	accepted := []string{"HTTP_ADDR"}
	for _, name := range env.LabelingService.NamesReadBy(env.ReadBySettings) {
		if slices.Contains(accepted, name) {
			continue
		}
		var instance string
		for n := range refused {
			if env.Declared(n) == name {
				instance = n
			}
		}
		require.NotEmpty(t, instance, "%s: give it values labeling refuses", name)
		for _, value := range refused[instance] {
			kv := fanout()
			kv[instance] = value
			_, err := config.LoadLabeling(lookup(kv))
			require.Error(t, err, "%s=%q", instance, value)
			require.True(t, strings.HasPrefix(err.Error(), instance+": "), "%s=%q: %s", instance, value, err)
			require.NotContains(t, err.Error(), "\n")
		}
	}
}

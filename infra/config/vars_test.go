package config_test

import (
	"context"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/telemetry"
)

// lookedUp runs read under a lookup over each env in turn and returns every
// name it looked up, set or not. Several envs let a reader take its branches
// (LoadAuth reads AUTH_ISSUER only once AUTH_JWKS_URL is set).
func lookedUp(read func(config.Lookup), envs ...map[string]string) []string {
	seen := map[string]bool{}
	for _, e := range envs {
		read(func(name string) (string, bool) {
			// NATS_CONSUMER_BILLING_TYPES is NATS_CONSUMER_<NAME>_TYPES, SUBSCRIBER_LEDGER_URL is SUBSCRIBER_<NAME>_URL
			seen[config.Declared(config.VarOf(name))] = true
			v, ok := e[name]
			return v, ok
		})
	}
	return slices.Sorted(maps.Keys(seen))
}

func declared(s config.Service, r config.Reader) []string {
	var out []string
	for _, v := range config.Vars {
		if v.Services&s != 0 && v.Reader == r {
			out = append(out, v.Name)
		}
	}
	return out
}

// Every variable a service's code looks up is declared in config.Vars, for
// that service and that reader, and every one declared is looked up: the usage
// texts, built from config.Vars, name all a service reads and nothing else.
func TestVarsAreWhatTheServicesLookUp(t *testing.T) {
	t.Parallel()
	valid := map[string]string{
		"DATABASE_URL": "postgres://h/db", "EVENTS_TOKEN": "t",
		"EVENTS_TRANSPORT": "nats", "NATS_URL": "nats://h:4222",
	}
	settings := map[config.Service]func(config.Lookup){
		// What serve, the operator commands and healthcheck of each read.
		config.LabelingService: func(l config.Lookup) {
			_, _ = config.LoadLabeling(l)
			_, _ = config.LoadCommand(l, config.DefaultLabelingDatabase)
			config.LoadHTTPAddr(l, ":8080")
		},
		config.BillingService: func(l config.Lookup) {
			_, _ = config.LoadBilling(l)
			_, _ = config.LoadCommand(l, config.DefaultBillingDatabase)
			config.LoadHTTPAddr(l, ":8081")
		},
	}
	services := map[string]config.Service{"labeling": config.LabelingService, "billing": config.BillingService}
	for name, svc := range services {
		t.Run(name+": the settings it looks up are those declared for it", func(t *testing.T) {
			t.Parallel()
			fanout := map[string]string{
				"DATABASE_URL": "postgres://h/db", "EVENTS_TOKEN": "t", "SUBSCRIBERS": "ledger",
				"SUBSCRIBER_LEDGER_URL": "http://ledger:8082", "SUBSCRIBER_LEDGER_TOKEN": "l", "SUBSCRIBER_LEDGER_TYPES": "RuleActivated",
			}
			require.ElementsMatch(t, declared(svc, config.ReadBySettings), lookedUp(settings[svc], map[string]string{}, valid, fanout))
		})

		t.Run(name+": the authentication variables it looks up are those declared", func(t *testing.T) {
			t.Parallel()
			read := func(l config.Lookup) { _, _ = config.LoadAuth(l) }
			require.ElementsMatch(t, declared(svc, config.ReadByAuth),
				lookedUp(read, map[string]string{}, map[string]string{"AUTH_JWKS_URL": "http://issuer/jwks"}))
		})

		t.Run(name+": the tracing variables infra/telemetry looks up are those declared", func(t *testing.T) {
			t.Parallel()
			read := func(l config.Lookup) {
				cfg := telemetry.Config{Service: name, Lookup: l}
				if !cfg.On() {
					return
				}
				// A protocol it refuses, so that Start reads both protocol
				// variables and installs nothing in this test process.
				_, err := telemetry.Start(context.Background(), cfg)
				require.ErrorContains(t, err, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
			}
			require.ElementsMatch(t, declared(svc, config.ReadByTelemetry), lookedUp(read,
				map[string]string{},
				map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}))
		})
	}

	t.Run("only the SDK's own OTEL_* variables are declared as read where no lookup sees them", func(t *testing.T) {
		t.Parallel()
		sdk := declared(config.LabelingService|config.BillingService, config.ReadBySDK)
		require.NotEmpty(t, sdk)
		for _, name := range sdk {
			require.True(t, strings.HasPrefix(name, "OTEL_"), name)
		}
	})
}

// envVar is how a variable's name looks in a usage text.
// A template's <NAME> is part of it (SUBSCRIBER_<NAME>_URL,
// NATS_CONSUMER_<NAME>_TYPES); SUBSCRIBERS is the one name without an underscore.
var envVar = regexp.MustCompile(`\b[A-Z][A-Z0-9]*(?:_(?:[A-Z0-9]+|<NAME>))+\b|\bSUBSCRIBERS\b`)

func TestServiceUsage(t *testing.T) {
	t.Parallel()
	for name, svc := range map[string]config.Service{"labeling": config.LabelingService, "billing": config.BillingService} {
		t.Run(name+": names every variable it reads and no other", func(t *testing.T) {
			t.Parallel()
			usage := strings.Join(svc.Usage(), "\n")
			require.ElementsMatch(t, svc.Names(), slices.Compact(slices.Sorted(slices.Values(envVar.FindAllString(usage, -1)))))
		})
	}

	t.Run("the contract's lists leave out only the standard OTEL_* variables", func(t *testing.T) {
		t.Parallel()
		for _, v := range config.Vars {
			in := slices.Contains(config.LabelingVars, v.Name) || slices.Contains(config.BillingVars, v.Name)
			require.Equal(t, !v.Standard, in, v.Name)
			if v.Standard {
				require.True(t, strings.HasPrefix(v.Name, "OTEL_"), v.Name)
			}
		}
	})
}

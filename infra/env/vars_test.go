package env_test

import (
	"context"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/telemetry"
)

// lookedUp runs read under a lookup over each env in turn and returns every
// name it looked up, set or not. Several envs let a reader take its branches
// (LoadAuth reads AUTH_ISSUER only once AUTH_JWKS_URL is set).
func lookedUp(read func(env.Lookup), envs ...map[string]string) []string {
	seen := map[string]bool{}
	for _, e := range envs {
		read(func(name string) (string, bool) {
			seen[env.Declared(name)] = true // NATS_CONSUMER_BILLING_TYPES is NATS_CONSUMER_<NAME>_TYPES
			v, ok := e[name]
			return v, ok
		})
	}
	return slices.Sorted(maps.Keys(seen))
}

// Every variable infra/env's own readers of both services (LoadAuth, and
// infra/telemetry through the lookup the service gives it) look up is
// declared in env.Vars, for that service and that reader, and every one
// declared is looked up. Each binary's loader package holds the same test
// of its loader (ReadBySettings): the usage texts, built from env.Vars, name
// all a service reads and nothing else.
func TestVarsAreWhatTheServicesLookUp(t *testing.T) {
	t.Parallel()
	services := map[string]env.Service{"labeling": env.LabelingService, "billing": env.BillingService}
	for name, svc := range services {
		t.Run(name+": the authentication variables it looks up are those declared", func(t *testing.T) {
			t.Parallel()
			read := func(l env.Lookup) { _, _ = env.LoadAuth(l) }
			require.ElementsMatch(t, svc.NamesReadBy(env.ReadByAuth),
				lookedUp(read, map[string]string{}, map[string]string{"AUTH_JWKS_URL": "http://issuer/jwks"}))
		})

		t.Run(name+": the tracing variables infra/telemetry looks up are those declared", func(t *testing.T) {
			t.Parallel()
			read := func(l env.Lookup) {
				cfg := telemetry.Config{Service: name, Lookup: l}
				if !cfg.On() {
					return
				}
				// A protocol it refuses, so that Start reads both protocol
				// variables and installs nothing in this test process.
				_, err := telemetry.Start(context.Background(), cfg)
				require.ErrorContains(t, err, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
			}
			require.ElementsMatch(t, svc.NamesReadBy(env.ReadByTelemetry), lookedUp(read,
				map[string]string{},
				map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}))
		})
	}

	t.Run("only the SDK's own OTEL_* variables are declared as read where no lookup sees them", func(t *testing.T) {
		t.Parallel()
		sdk := (env.LabelingService | env.BillingService).NamesReadBy(env.ReadBySDK)
		require.NotEmpty(t, sdk)
		for _, name := range sdk {
			require.True(t, strings.HasPrefix(name, "OTEL_"), name)
		}
	})
}

// envVar is how a variable's name looks in a usage text.
// A template's <NAME> is part of it (SUBSCRIBER_<NAME>_URL); SUBSCRIBERS is
// the one name without an underscore.
var envVar = regexp.MustCompile(`\b[A-Z][A-Z0-9]*(?:_(?:[A-Z0-9]+|<NAME>))+\b|\bSUBSCRIBERS\b`)

func TestServiceUsage(t *testing.T) {
	t.Parallel()
	for name, svc := range map[string]env.Service{"labeling": env.LabelingService, "billing": env.BillingService} {
		t.Run(name+": names every variable it reads and no other", func(t *testing.T) {
			t.Parallel()
			usage := strings.Join(svc.Usage(), "\n")
			require.ElementsMatch(t, svc.Names(), slices.Compact(slices.Sorted(slices.Values(envVar.FindAllString(usage, -1)))))
		})
	}

	t.Run("the contract's lists leave out only the standard OTEL_* variables", func(t *testing.T) {
		t.Parallel()
		for _, v := range env.Vars {
			in := slices.Contains(env.LabelingVars, v.Name) || slices.Contains(env.BillingVars, v.Name)
			require.Equal(t, !v.Standard, in, v.Name)
			if v.Standard {
				require.True(t, strings.HasPrefix(v.Name, "OTEL_"), v.Name)
			}
		}
	})
}

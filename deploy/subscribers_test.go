package deploy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	envvar "github.com/acme/outboxpair/infra/env"
)

// The subscriber variables are templates (SUBSCRIBER_<NAME>_URL): each is
// documented once in every variable table, for labeling only, and an
// environment that sets one subscriber's instances, as a deployment would,
// loads with serve's rules; one that sets them without SUBSCRIBERS, or with
// EVENTS_TRANSPORT=nats, is read as the contract says.
func TestContractSubscriberVariables(t *testing.T) {
	t.Parallel()
	templates := []string{"SUBSCRIBER_<NAME>_URL", "SUBSCRIBER_<NAME>_TOKEN", "SUBSCRIBER_<NAME>_TYPES"}

	t.Run("each template and SUBSCRIBERS is documented once, for labeling alone, in every variable table", func(t *testing.T) {
		t.Parallel()
		for _, file := range varDocs {
			docs := map[string][]string{}
			for _, v := range documentedVars(t, file) {
				docs[v.name] = v.services
			}
			for _, name := range append([]string{"SUBSCRIBERS"}, templates...) {
				require.Equal(t, []string{"labeling"}, docs[name], "%s: %s", file, name)
				require.Contains(t, envvar.LabelingVars, name)
			}
		}
	})

	t.Run("one subscriber's instances load, and each maps to its template", func(t *testing.T) {
		t.Parallel()
		env := map[string]string{
			"DATABASE_URL": "postgres://h/db", "EVENTS_TOKEN": "t", "AUTH_DISABLED": "true",
			"SUBSCRIBERS":             "ledger",
			"SUBSCRIBER_LEDGER_URL":   "http://ledger:8082",
			"SUBSCRIBER_LEDGER_TOKEN": "ledger-token",
			"SUBSCRIBER_LEDGER_TYPES": "RuleActivated",
		}
		require.NoError(t, binaries["labeling"].load(lookupOf(env)))
		for name := range env {
			if strings.HasPrefix(name, "SUBSCRIBER_") {
				require.Contains(t, templates, envvar.Declared(name))
			}
		}
	})

	t.Run("with EVENTS_TRANSPORT=nats the same environment stops start-up naming SUBSCRIBERS", func(t *testing.T) {
		t.Parallel()
		env := map[string]string{
			"DATABASE_URL": "postgres://h/db", "EVENTS_TOKEN": "t", "AUTH_DISABLED": "true",
			"EVENTS_TRANSPORT": "nats", "NATS_URL": "nats://h:4222",
			"SUBSCRIBERS":             "ledger",
			"SUBSCRIBER_LEDGER_URL":   "http://ledger:8082",
			"SUBSCRIBER_LEDGER_TOKEN": "ledger-token",
			"SUBSCRIBER_LEDGER_TYPES": "RuleActivated",
		}
		err := binaries["labeling"].load(lookupOf(env))
		require.Error(t, err)
		require.True(t, strings.HasPrefix(err.Error(), "SUBSCRIBERS: "), err.Error())
	})
}

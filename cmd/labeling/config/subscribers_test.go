package config_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/cmd/labeling/config"
	"github.com/acme/outboxpair/infra/env"
)

// fanoutEnv is base() with two further subscribers.
func fanoutEnv() map[string]string {
	kv := base()
	kv["SUBSCRIBERS"] = "ledger, search"
	kv["SUBSCRIBER_LEDGER_URL"] = "http://ledger:8082"
	kv["SUBSCRIBER_LEDGER_TOKEN"] = "ledger-token"
	kv["SUBSCRIBER_LEDGER_TYPES"] = "RuleActivated"
	kv["SUBSCRIBER_SEARCH_URL"] = "https://search.example"
	kv["SUBSCRIBER_SEARCH_TOKEN"] = "search-token"
	kv["SUBSCRIBER_SEARCH_TYPES"] = "RuleActivated, RuleDeactivated"
	return kv
}

func TestLoadLabelingSubscribers(t *testing.T) {
	t.Parallel()

	t.Run("unset SUBSCRIBERS is billing alone, and no SUBSCRIBER_ variable is read", func(t *testing.T) {
		t.Parallel()
		kv := base()
		kv["SUBSCRIBER_LEDGER_URL"] = "not a url: unread without SUBSCRIBERS"
		var looked []string
		c, err := config.LoadLabeling(func(name string) (string, bool) {
			looked = append(looked, name)
			v, ok := kv[name]
			return v, ok
		})
		require.NoError(t, err)
		require.Empty(t, c.Subscribers)
		for _, name := range looked {
			require.False(t, strings.HasPrefix(name, "SUBSCRIBER_"), name)
		}
	})

	t.Run("each name of SUBSCRIBERS gets its URL, token and types, in order", func(t *testing.T) {
		t.Parallel()
		c, err := config.LoadLabeling(lookup(fanoutEnv()))
		require.NoError(t, err)
		require.Equal(t, []config.Subscriber{
			{Name: "ledger", URL: "http://ledger:8082", Token: "ledger-token", Types: []string{"RuleActivated"}},
			{Name: "search", URL: "https://search.example", Token: "search-token", Types: []string{"RuleActivated", "RuleDeactivated"}},
		}, c.Subscribers)
	})

	bad := []struct {
		name, variable, value, says string
	}{
		{"a name that is not a lowercase identifier", "SUBSCRIBERS", "ledger,Search", "lowercase identifier"},
		{"an empty name in the list", "SUBSCRIBERS", "ledger,,search", "lowercase identifier"},
		{"a name given twice", "SUBSCRIBERS", "ledger,search,ledger", "twice"},
		{"billing, which is BILLING_URL's", "SUBSCRIBERS", "ledger,billing", "BILLING_URL"},
		{"a subscriber without a URL", "SUBSCRIBER_LEDGER_URL", "", "required"},
		{"a URL that is not http(s)", "SUBSCRIBER_SEARCH_URL", "search:8082", "http(s)"},
		{"a subscriber without a token", "SUBSCRIBER_LEDGER_TOKEN", "", "required"},
		{"a blank token", "SUBSCRIBER_SEARCH_TOKEN", "  ", "blank"},
		{"billing's token", "SUBSCRIBER_LEDGER_TOKEN", "secret", "EVENTS_TOKEN"},
		{"another subscriber's token", "SUBSCRIBER_SEARCH_TOKEN", "ledger-token", "SUBSCRIBER_LEDGER_TOKEN"},
		{"a subscriber without types", "SUBSCRIBER_LEDGER_TYPES", "", "required"},
		{"a type labeling does not publish", "SUBSCRIBER_SEARCH_TYPES", "RuleActivated,RuleDeleted", "RuleDeleted"},
		{"a type given twice", "SUBSCRIBER_LEDGER_TYPES", "RuleActivated,RuleActivated", "twice"},
		{"an empty type", "SUBSCRIBER_LEDGER_TYPES", "RuleActivated,", "empty type"},
	}
	for _, tc := range bad {
		t.Run("refuses "+tc.name+" in one line naming "+tc.variable, func(t *testing.T) {
			t.Parallel()
			kv := fanoutEnv()
			kv[tc.variable] = tc.value
			_, err := config.LoadLabeling(lookup(kv))
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), tc.variable+": "), err.Error())
			require.Contains(t, err.Error(), tc.says)
			require.NotContains(t, err.Error(), "\n")
		})
	}

	t.Run("refuses SUBSCRIBERS with EVENTS_TRANSPORT=nats, naming it", func(t *testing.T) {
		t.Parallel()
		kv := fanoutEnv()
		kv["EVENTS_TRANSPORT"] = "nats"
		kv["NATS_URL"] = "nats://127.0.0.1:4222"
		_, err := config.LoadLabeling(lookup(kv))
		require.Error(t, err)
		require.True(t, strings.HasPrefix(err.Error(), "SUBSCRIBERS: "), err.Error())
		require.Contains(t, err.Error(), "EVENTS_TRANSPORT=nats")
	})

	t.Run("Declared maps each subscriber's variable to its declared template", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "SUBSCRIBER_<NAME>_TOKEN", env.Declared(config.SubscriberVar("ledger_2", "TOKEN")))
		require.Equal(t, "SUBSCRIBERS", env.Declared("SUBSCRIBERS"))
		require.Contains(t, env.LabelingVars, "SUBSCRIBER_<NAME>_TYPES")
		require.NotContains(t, env.BillingVars, "SUBSCRIBERS")
	})
}

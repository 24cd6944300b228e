package billing_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
)

// counter reads billing_events_total{type, outcome} from the default registry.
func counter(t *testing.T, typ, outcome string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != "billing_events_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["type"] == typ && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestEventsMetric is deliberately not parallel: the counters are process-wide,
// and a sequential top-level test runs before any parallel test is released, so
// the deltas it reads are its own.
func TestEventsMetric(t *testing.T) {
	b := setup(t, freshDB(t, sqldb.Postgres))
	type key struct{ typ, outcome string }
	keys := []key{
		{billing.RuleActivated, inbox.OutcomeApplied},
		{billing.RuleActivated, inbox.OutcomeAlreadyApplied},
		{billing.RuleDeactivated, inbox.OutcomeApplied},
		{billing.RuleActivated, inbox.OutcomeRejected},
		{"other", inbox.OutcomeRejected},
		{"other", inbox.OutcomeUnknownType},
		{"SomethingNew", inbox.OutcomeUnknownType},
	}
	before := map[key]float64{}
	for _, k := range keys {
		before[k] = counter(t, k.typ, k.outcome)
	}

	act := newEvent(billing.RuleActivated, uuid.New())
	for range 3 {
		require.Equal(t, http.StatusNoContent, b.deliver(t, act.body()).Code)
	}
	require.Equal(t, http.StatusNoContent, b.deliver(t, newEvent(billing.RuleDeactivated, uuid.New()).body()).Code)
	bad := fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":1,"payload":{"orgId":"x","ruleId":"y"}}`, uuid.New())
	require.Equal(t, http.StatusBadRequest, b.deliver(t, bad).Code)
	require.Equal(t, http.StatusBadRequest, b.deliver(t, `{`).Code)
	// A type without a handler is counted under its name when well-formed
	// (infra/inbox's test has the bound of 32 such names); a name that is not is other.
	require.Equal(t, http.StatusNotImplemented, b.deliver(t, newEvent("SomethingNew", uuid.New()).body()).Code)
	require.Equal(t, http.StatusNotImplemented, b.deliver(t, newEvent("Something New!", uuid.New()).body()).Code)

	want := map[key]float64{
		{billing.RuleActivated, inbox.OutcomeApplied}:        1,
		{billing.RuleActivated, inbox.OutcomeAlreadyApplied}: 2,
		{billing.RuleDeactivated, inbox.OutcomeApplied}:      1,
		{billing.RuleActivated, inbox.OutcomeRejected}:       1,
		{"other", inbox.OutcomeRejected}:                     1,
		{"other", inbox.OutcomeUnknownType}:                  1,
		{"SomethingNew", inbox.OutcomeUnknownType}:           1,
	}
	for _, k := range keys {
		require.Equal(t, want[k], counter(t, k.typ, k.outcome)-before[k], "billing_events_total{type=%q,outcome=%q}", k.typ, k.outcome)
	}
}

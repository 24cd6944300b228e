package labeling

import "github.com/prometheus/client_golang/prometheus"

// Counted after commit, so a rolled-back attempt never counts.
var (
	rulesCreated = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "labeling_rules_created_total",
		Help: "Rules created (replays not counted).",
	})
	stateChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "labeling_rule_state_changes_total",
		Help: "Rule state changes committed with their outbox event, by the new state.",
	}, []string{"to"})
)

func init() { prometheus.MustRegister(rulesCreated, stateChanges) }

package billing

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/outboxpair/infra/fault"
)

// Outcomes of billing_events_total. Every delivery that passes the token check is
// counted once, so deliveries - events = already_applied: the duplicates the
// receipts absorbed.
const (
	OutcomeApplied        = "applied"         // receipt new, change committed (204)
	OutcomeAlreadyApplied = "already_applied" // receipt existed: a redelivery, nothing changed (204)
	OutcomeRejected       = "rejected"        // malformed envelope or invalid payload (400)
	OutcomeUnknownType    = "unknown_type"    // a type without a handler, no receipt (501)
	OutcomeFailed         = "failed"          // database unavailable or a defect; the sender retries (5xx)
)

// typeOther is the type label of any type without a handler, so that a sender
// cannot grow the label set.
const typeOther = "other"

var (
	events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "billing_events_total",
		Help: "Authorized event deliveries, by event type (a type billing has a handler for, or other) and outcome (applied, already_applied, rejected, unknown_type, failed).",
	}, []string{"type", "outcome"})
	contentionRetries = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "billing_apply_contention_retries_total",
		Help: "Event transactions retried in-process after a serialization failure or deadlock.",
	})
	groupSizes = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "billing_apply_group_size",
		Help:    "Events per apply transaction: deliveries that arrived while a transaction was in flight are applied together in the next (BILLING_APPLY_GROUP_MAX bounds it).",
		Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 to 1024
	})
	waiting = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "billing_apply_waiting",
		Help: "Deliveries waiting for the next apply transaction while one is in flight.",
	})
)

func init() { prometheus.MustRegister(events, contentionRetries, groupSizes, waiting) }

func (s *Service) countEvent(typ, outcome string) {
	if !s.handles(typ) {
		typ = typeOther
	}
	events.WithLabelValues(typ, outcome).Inc()
}

// countDecodeFailure counts a delivery Decode refused: a type without a handler,
// or a payload its handler refused.
func (s *Service) countDecodeFailure(typ string, err error) {
	if fault.CodeOf(err) == fault.NotImplemented {
		s.countEvent(typ, OutcomeUnknownType)
		return
	}
	s.countEvent(typ, OutcomeRejected)
}

// countApply counts the outcome of an Apply that was called.
func (s *Service) countApply(typ string, applied bool, err error) {
	switch {
	case err != nil:
		s.countEvent(typ, OutcomeFailed)
	case applied:
		s.countEvent(typ, OutcomeApplied)
	default:
		s.countEvent(typ, OutcomeAlreadyApplied)
	}
}

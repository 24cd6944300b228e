package inbox

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/outboxpair/infra/fault"
)

// Outcomes of NAME_events_total. Every delivery that passes the token check is
// counted once, so deliveries - events = already_applied: the duplicates the
// receipts absorbed.
const (
	OutcomeApplied        = "applied"         // receipt new, effect committed (204)
	OutcomeAlreadyApplied = "already_applied" // receipt existed: a redelivery, nothing changed (204)
	OutcomeRejected       = "rejected"        // malformed envelope or invalid payload (400)
	OutcomeUnknownType    = "unknown_type"    // a type without a handler, no receipt (501)
	OutcomeFailed         = "failed"          // database unavailable or a defect; the sender retries (5xx)
)

// TypeOther is the type label of a delivery whose type is not named: a
// malformed envelope, or a type without a handler whose name is not
// well-formed (WellFormedType) or came after MaxTypeLabels others.
const TypeOther = "other"

// MaxTypeLabels bounds the type labels of types without a handler: the
// first MaxTypeLabels well-formed names a consumer's series meet in a process
// are each counted under their own label (an operator sees which type a
// deploy is missing); any later one under TypeOther, so that a sender cannot
// grow the label set past the consumer's own types plus MaxTypeLabels + 1.
const MaxTypeLabels = 32

// typeName is a well-formed type name: a letter, then up to 63 letters,
// digits, '_', '.' or '-'.
var typeName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_.-]{0,63}$`)

// WellFormedType reports whether typ is a well-formed type name, one a
// metric may carry as its label: a letter, then up to 63 letters, digits,
// '_', '.' or '-'.
func WellFormedType(typ string) bool { return typeName.MatchString(typ) }

// metrics are one consumer's series, named after it (billing_events_total, …).
type metrics struct {
	events            *prometheus.CounterVec
	contentionRetries prometheus.Counter
	groupSizes        prometheus.Histogram
	waiting           prometheus.Gauge
	signatureRejects  prometheus.Counter
	failedDropped     prometheus.Counter

	mu        sync.Mutex
	unhandled map[string]bool // the labels given to types without a handler, at most MaxTypeLabels
}

var (
	metricsMu sync.Mutex
	byName    = map[string]*metrics{}
)

// metricsOf returns the series of the consumer name, registered with the
// default registry the first time (every Inbox of one consumer shares them).
func metricsOf(name, natsFailed string) *metrics {
	metricsMu.Lock()
	defer metricsMu.Unlock()
	if m, ok := byName[name]; ok {
		return m
	}
	m := &metrics{
		unhandled: map[string]bool{},
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: name + "_events_total",
			Help: "Authorized event deliveries, by event type (a type " + name + " has a handler for; a well-formed type without one, up to " + strconv.Itoa(MaxTypeLabels) + " such names; or other) and outcome (applied, already_applied, rejected, unknown_type, failed).",
		}, []string{"type", "outcome"}),
		contentionRetries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: name + "_apply_contention_retries_total",
			Help: "Event transactions retried in-process after a serialization failure or deadlock.",
		}),
		groupSizes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    name + "_apply_group_size",
			Help:    "Events per apply transaction: deliveries that arrived while a transaction was in flight are applied together in the next (" + strings.ToUpper(name) + "_APPLY_GROUP_MAX bounds it).",
			Buckets: prometheus.ExponentialBuckets(1, 2, 11), // 1 to 1024
		}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: name + "_apply_waiting",
			Help: "Deliveries waiting for the next apply transaction while one is in flight.",
		}),
		signatureRejects: prometheus.NewCounter(prometheus.CounterOpts{
			Name: name + "_nats_signature_rejected_total",
			Help: "Stream messages terminated unapplied because their Events-Signature was missing or wrong: someone other than labeling published on labeling.events.>, or a message was altered.",
		}),
		failedDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: name + "_nats_failed_dropped_total",
			Help: "Records of " + natsFailed + " dropped past NATS_FAILED_MAX_ROWS/NATS_FAILED_MAX_BYTES: messages whose signature failed under the current keys, oldest first.",
		}),
	}
	prometheus.MustRegister(m.events, m.contentionRetries, m.groupSizes, m.waiting, m.signatureRejects, m.failedDropped)
	byName[name] = m
	return m
}

// countEvent counts one delivery of typ with outcome.
func (ib *Inbox[V]) countEvent(typ, outcome string) {
	if !ib.Handles(typ) {
		typ = ib.m.unhandledLabel(typ)
	}
	ib.m.events.WithLabelValues(typ, outcome).Inc()
}

// unhandledLabel is the label of typ, a type without a handler: its name
// when well-formed and among the first MaxTypeLabels such names, else
// TypeOther.
func (m *metrics) unhandledLabel(typ string) string {
	if typ == TypeOther || !WellFormedType(typ) {
		return TypeOther
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.unhandled[typ] {
		return typ
	}
	if len(m.unhandled) >= MaxTypeLabels {
		return TypeOther
	}
	m.unhandled[typ] = true
	return typ
}

// decodeFailed counts a delivery Decode refused: a type without a handler,
// which it also logs with the type's name (quotedType), or a payload its
// handler refused.
func (ib *Inbox[V]) decodeFailed(ctx context.Context, id uuid.UUID, typ string, err error) {
	if fault.CodeOf(err) == fault.NotImplemented {
		ib.countEvent(typ, OutcomeUnknownType)
		ib.logger.WarnContext(ctx, "event type not handled: deploy a "+ib.c.Name+" that has its handler",
			"consumer", ib.c.Name, "type", quotedType(typ), "event_id", id.String())
		return
	}
	ib.countEvent(typ, OutcomeRejected)
}

// countApply counts the outcome of an Apply that was called.
func (ib *Inbox[V]) countApply(typ string, applied bool, err error) {
	switch {
	case err != nil:
		ib.countEvent(typ, OutcomeFailed)
	case applied:
		ib.countEvent(typ, OutcomeApplied)
	default:
		ib.countEvent(typ, OutcomeAlreadyApplied)
	}
}

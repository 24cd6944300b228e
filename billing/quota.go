// Package billing is the consumer side of the pair: it keeps each org's count of
// active labeling rules from the events that Labeling's outbox delivers at least
// once and in no particular order, each type applied by its one EventHandler
// (Events). An event adds to a counter, so it is applied through infra/inbox:
// with a receipt keyed by its id, written in the same transaction as the
// change, so a redelivery finds the receipt and changes nothing, and a failure
// before the commit leaves neither. Billing brings only its part: the
// handlers, the effect on billing_quota (effect.go), the quota read, the
// console, its settings and its tables' names.
package billing

import (
	"errors"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/wire"
)

// The event types billing has a handler for (Events). Any other type is
// answered 501 and the sender retries it, so a producer may ship a new type
// before billing learns it.
const (
	RuleActivated   = "RuleActivated"   // adds 1 to the org's active rules
	RuleDeactivated = "RuleDeactivated" // subtracts 1
)

// Quota is an org's count of active rules as billing has applied it. It converges
// to the true count once every event has been delivered; before that it may even
// be negative, when a deactivation arrives before its activation.
type Quota struct {
	OrgID       uuid.UUID
	ActiveRules int64
}

// Effect is what one event does to billing's state, as its type's handler
// computes it: Delta is added to OrgID's active rules in the transaction that
// writes the event's receipt, and only then (the inbox's guarantee).
type Effect struct {
	OrgID uuid.UUID
	Delta int64
}

// Attributes names the org on the span of the event's apply (inbox.Attributer).
func (e Effect) Attributes() []attribute.KeyValue {
	return []attribute.KeyValue{attribute.String("billing.org_id", e.OrgID.String())}
}

// Event is a delivered event whose type has a handler, checked by it and
// ready to apply: Service.Decode builds it, so its Value is its handler's
// Effect.
type Event = inbox.Event[Effect]

// EventHandler is billing's handling of one event type; Handle builds it. A
// Service applies only the types it has an EventHandler for (Events, or
// Handling's).
type EventHandler = inbox.Handler[Effect]

// Handle returns the EventHandler of event type typ (inbox.Handle): the
// payload decoded into P, effect checks it and returns the event's Effect; a
// payload that does not decode, or that effect refuses, is a fault.Invalid.
func Handle[P any](typ string, effect func(P) (Effect, error)) EventHandler {
	return inbox.Handle(typ, effect)
}

// Events is the one registry of the events billing applies: one EventHandler
// per type, and no other place says what a type does. A delivered type with no
// handler here is answered 501 (HTTP) or naked until NATS_MAX_DELIVERIES
// (NATS), with no receipt and no effect. Adding an event: docs/events.md.
func Events() []EventHandler {
	return []EventHandler{
		Handle(RuleActivated, ruleEffect(+1)),
		Handle(RuleDeactivated, ruleEffect(-1)),
	}
}

// rulePayload is the part of RuleActivated and RuleDeactivated billing reads.
type rulePayload struct {
	OrgID  *string `json:"orgId"`
	RuleID *string `json:"ruleId"`
}

// ruleEffect is the handler of a rule event that changes its org's active
// rules by delta. The rule id is not counted, but an event without a valid one
// is not the event labeling sends, so it is refused rather than applied.
func ruleEffect(delta int64) func(rulePayload) (Effect, error) {
	return func(p rulePayload) (Effect, error) {
		if p.OrgID == nil || p.RuleID == nil {
			return Effect{}, errors.New("orgId and ruleId are required")
		}
		org, err := wire.ParseID(*p.OrgID)
		if err != nil {
			return Effect{}, errors.New("orgId must be a UUID")
		}
		if _, err := wire.ParseID(*p.RuleID); err != nil {
			return Effect{}, errors.New("ruleId must be a UUID")
		}
		return Effect{OrgID: org, Delta: delta}, nil
	}
}

// ParseOrgID parses an org id from a path; a malformed one is a fault.Invalid.
func ParseOrgID(s string) (uuid.UUID, error) {
	id, err := wire.ParseID(s)
	if err != nil {
		return uuid.Nil, fault.Errorf(fault.Invalid, "orgId must be a UUID")
	}
	return id, nil
}

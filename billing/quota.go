// Package billing is the consumer side of the pair: it keeps each org's count of
// active labeling rules from the events that Labeling's outbox delivers at least
// once and in no particular order, each type applied by its one EventHandler
// (Events). An event
// adds to a counter, so it is applied with a receipt keyed by its id, written in
// the same transaction as the change: a redelivery finds the receipt and changes
// nothing, and a failure before the commit leaves neither.
package billing

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/fault"
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

// Event is a delivered event whose type has a handler, checked by it and ready
// to apply: Service.Decode builds it, so its Delta is its handler's Effect.
type Event struct {
	ID         uuid.UUID // the outbox row id: the dedup key of the receipt
	Type       string    // a type of Events (or of the Service's Handling)
	OccurredAt int64     // epoch ms of the append in Labeling
	OrgID      uuid.UUID // the org whose active rules Delta changes
	Delta      int64     // added to OrgID's active rules, once, with the receipt
}

// Effect is what one event does to billing's state, as its type's handler
// computes it: Delta is added to OrgID's active rules in the transaction that
// writes the event's receipt, and only then.
type Effect struct {
	OrgID uuid.UUID
	Delta int64
}

// EventHandler is billing's handling of one event type; Handle builds it. A
// Service applies only the types it has an EventHandler for (Events, or
// Handling's).
type EventHandler struct {
	typ    string
	effect func(payload json.RawMessage) (Effect, error)
}

// Handle returns the EventHandler of event type typ. The payload is decoded
// into P, ignoring fields P does not have (payloads grow by new optional
// fields), and effect checks it and returns the event's Effect. A payload that does not
// decode, or that effect refuses, is a fault.Invalid: 400 over HTTP, recorded
// and terminated over NATS, never applied.
func Handle[P any](typ string, effect func(P) (Effect, error)) EventHandler {
	return EventHandler{typ: typ, effect: func(raw json.RawMessage) (Effect, error) {
		var p P
		// Names match P's json tags exactly, as in the envelope: another letter
		// case is a field P does not have, ignored like any other.
		if err := jsonv2.Unmarshal(raw, &p); err != nil {
			return Effect{}, fault.Errorf(fault.Invalid, "payload of %s: %s", typ, decodeProblem(err))
		}
		e, err := effect(p)
		if err != nil {
			return Effect{}, fault.Errorf(fault.Invalid, "payload of %s: %v", typ, err)
		}
		return e, nil
	}}
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
		org, err := ParseID(*p.OrgID)
		if err != nil {
			return Effect{}, errors.New("orgId must be a UUID")
		}
		if _, err := ParseID(*p.RuleID); err != nil {
			return Effect{}, errors.New("ruleId must be a UUID")
		}
		return Effect{OrgID: org, Delta: delta}, nil
	}
}

// decodeProblem says what is wrong with a payload that does not decode, in
// words safe to echo: the field and the JSON kind, never the Go types.
func decodeProblem(err error) string {
	var se *jsonv2.SemanticError
	if errors.As(err, &se) && se.JSONPointer != "" && se.JSONKind != 0 {
		return fmt.Sprintf("%s must not be a JSON %s", clip(strings.TrimPrefix(string(se.JSONPointer), "/"), 64), se.JSONKind)
	}
	return "not the JSON object its handler reads"
}

// Envelope is the delivery body as it arrives. The envelope itself is decoded
// strictly (an unknown field is a 400); the payload is the producer's event, which
// evolves additively, so only the fields billing reads are checked and any others
// are ignored.
type Envelope struct {
	ID         *string         `json:"id"`
	Type       *string         `json:"type"`
	OccurredAt *int64          `json:"occurredAt"`
	Payload    json.RawMessage `json:"payload"`
}

// Header checks the fields every delivery must have, whatever its type, and
// returns the event id and type. Every failure is a fault.Invalid.
func (env Envelope) Header() (uuid.UUID, string, error) {
	if env.ID == nil {
		return uuid.Nil, "", fault.Errorf(fault.Invalid, "id is required")
	}
	id, err := ParseID(*env.ID)
	if err != nil {
		return uuid.Nil, "", fault.Errorf(fault.Invalid, "id must be a UUID")
	}
	if env.Type == nil || *env.Type == "" {
		return uuid.Nil, "", fault.Errorf(fault.Invalid, "type is required")
	}
	if env.OccurredAt == nil || *env.OccurredAt <= 0 {
		return uuid.Nil, "", fault.Errorf(fault.Invalid, "occurredAt must be a positive integer (epoch ms)")
	}
	if !isObject(env.Payload) {
		return uuid.Nil, "", fault.Errorf(fault.Invalid, "payload must be a JSON object")
	}
	return id, *env.Type, nil
}

// ParseID parses a UUID in its canonical 36-character form (either case), other
// than the nil UUID. The braced, URN and hyphen-less forms uuid.Parse also
// accepts are refused, so that one id has one spelling on the wire.
func ParseID(s string) (uuid.UUID, error) {
	if len(s) != 36 {
		return uuid.Nil, fmt.Errorf("%q is not a UUID", clip(s, 64))
	}
	id, err := uuid.Parse(s)
	if err == nil && id == uuid.Nil {
		// The contract's one rule for both services: no id is the nil UUID.
		return uuid.Nil, errors.New("the nil UUID is not an id")
	}
	return id, err
}

// ParseOrgID parses an org id from a path; a malformed one is a fault.Invalid.
func ParseOrgID(s string) (uuid.UUID, error) {
	id, err := ParseID(s)
	if err != nil {
		return uuid.Nil, fault.Errorf(fault.Invalid, "orgId must be a UUID")
	}
	return id, nil
}

func isObject(raw json.RawMessage) bool {
	s := strings.TrimLeft(string(raw), " \t\r\n")
	return strings.HasPrefix(s, "{")
}

// clip bounds untrusted text echoed in a message.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

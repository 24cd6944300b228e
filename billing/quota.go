// Package billing is the consumer side of the pair: it keeps each org's count of
// active labeling rules from the RuleActivated and RuleDeactivated events that
// Labeling's outbox delivers at least once and in no particular order. An event
// adds to a counter, so it is applied with a receipt keyed by its id, written in
// the same transaction as the change: a redelivery finds the receipt and changes
// nothing, and a failure before the commit leaves neither.
package billing

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/fault"
)

// The event types billing applies. Any other type is answered 501 and the sender
// retries it, so a producer may ship a new type before billing learns it.
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

// Event is a delivered event of a type billing knows, checked and ready to apply.
type Event struct {
	ID         uuid.UUID // the outbox row id: the dedup key of the receipt
	Type       string    // RuleActivated or RuleDeactivated
	OccurredAt int64     // epoch ms of the append in Labeling
	OrgID      uuid.UUID
	RuleID     uuid.UUID
}

// Delta is the change the event makes to its org's active rules.
func (e Event) Delta() int64 {
	if e.Type == RuleDeactivated {
		return -1
	}
	return 1
}

// Known reports whether billing applies events of type t.
func Known(t string) bool { return t == RuleActivated || t == RuleDeactivated }

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

// payload is the part of RuleActivated and RuleDeactivated billing reads.
type payload struct {
	OrgID  *string `json:"orgId"`
	RuleID *string `json:"ruleId"`
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

// Event checks the envelope and, for a known type, its payload. An unknown type is
// a fault.NotImplemented; anything malformed is a fault.Invalid.
func (env Envelope) Event() (Event, error) {
	id, typ, err := env.Header()
	if err != nil {
		return Event{}, err
	}
	if !Known(typ) {
		return Event{}, fault.Errorf(fault.NotImplemented, "event type %q is not handled by billing", clip(typ, 64))
	}
	var p payload
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		return Event{}, fault.Errorf(fault.Invalid, "payload of %s: orgId and ruleId must be UUID strings", typ)
	}
	if p.OrgID == nil || p.RuleID == nil {
		return Event{}, fault.Errorf(fault.Invalid, "payload of %s: orgId and ruleId are required", typ)
	}
	org, err := ParseID(*p.OrgID)
	if err != nil {
		return Event{}, fault.Errorf(fault.Invalid, "payload.orgId must be a UUID")
	}
	rule, err := ParseID(*p.RuleID)
	if err != nil {
		return Event{}, fault.Errorf(fault.Invalid, "payload.ruleId must be a UUID")
	}
	return Event{ID: id, Type: typ, OccurredAt: *env.OccurredAt, OrgID: org, RuleID: rule}, nil
}

// ParseID parses a UUID in its canonical 36-character form (either case). The
// braced, URN and hyphen-less forms uuid.Parse also accepts are refused, so that
// one id has one spelling on the wire.
func ParseID(s string) (uuid.UUID, error) {
	if len(s) != 36 {
		return uuid.Nil, fmt.Errorf("%q is not a UUID", clip(s, 64))
	}
	return uuid.Parse(s)
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

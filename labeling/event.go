package labeling

import (
	"context"
	"errors"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/outbox"
)

// Events is the one list of the events labeling publishes: whichever
// EVENTS_TRANSPORT runs turns it into the relay's subscribers (Subscribers), so
// an event listed here is carried by HTTP and by NATS alike, and a tag appended
// but missing here is retried until dead-lettered under either. Adding an
// event: its type below, one Publish line here (docs/events.md).
func Events() []Publication {
	return []Publication{
		Publish[RuleActivated](),
		Publish[RuleDeactivated](),
	}
}

// Publication is one event type labeling publishes, not yet bound to a
// transport: given the transport's send, it is the relay's subscriber of the
// type's tag.
type Publication func(send outbox.Handler) outbox.Subscriber

// Publish is the Publication of E: each row is decoded into E (and validated,
// if E has Validate) before send carries it, so a row no consumer could apply
// fails at once instead of being sent.
func Publish[E outbox.Event]() Publication {
	return func(send outbox.Handler) outbox.Subscriber {
		return outbox.Subscribe(func(ctx context.Context, m outbox.Message, _ E) error { return send(ctx, m) })
	}
}

// Subscribers binds every event of events to send, the one transport the
// relay uses (delivery.Client.Deliver or stream.Publisher.Publish): one
// subscriber per event, none for any other tag.
func Subscribers(events []Publication, send outbox.Handler) []outbox.Subscriber {
	subs := make([]outbox.Subscriber, len(events))
	for i, publish := range events {
		subs[i] = publish(send)
	}
	return subs
}

// Tags are the tags of events, in their order: the types a subscriber may
// ask for (SUBSCRIBER_<NAME>_TYPES).
func Tags(events []Publication) []string {
	tags := make([]string, len(events))
	for i, publish := range events {
		tags[i] = publish(nil).Tag
	}
	return tags
}

// Event tags, the event_tag of their outbox rows and the "type" billing
// receives: a type billing has no handler for is answered 501 and retried.
const (
	TagRuleActivated   = "RuleActivated"
	TagRuleDeactivated = "RuleDeactivated"
)

// RuleActivated is appended, in the same transaction, when a rule goes from
// inactive to active. Its JSON encoding, {"orgId","ruleId"}, is the outbox payload
// and part of the contract: it may only grow by new optional fields.
type RuleActivated struct {
	OrgID  uuid.UUID `json:"orgId"`
	RuleID uuid.UUID `json:"ruleId"`
}

// RuleDeactivated is the mirror of RuleActivated: appended when a rule goes from
// active to inactive, with the same payload shape.
type RuleDeactivated struct {
	OrgID  uuid.UUID `json:"orgId"`
	RuleID uuid.UUID `json:"ruleId"`
}

// EventTag implements outbox.Event.
func (RuleActivated) EventTag() string { return TagRuleActivated }

// EventTag implements outbox.Event.
func (RuleDeactivated) EventTag() string { return TagRuleDeactivated }

// Validate rejects a payload without both ids, so that outbox.Subscribe fails such
// a row at once instead of delivering it.
func (e RuleActivated) Validate() error { return validateIDs(e.OrgID, e.RuleID) }

// Validate rejects a payload without both ids, so that outbox.Subscribe fails such
// a row at once instead of delivering it.
func (e RuleDeactivated) Validate() error { return validateIDs(e.OrgID, e.RuleID) }

func validateIDs(org, rule uuid.UUID) error {
	switch {
	case org == uuid.Nil:
		return errors.New("orgId is missing or nil")
	case rule == uuid.Nil:
		return errors.New("ruleId is missing or nil")
	}
	return nil
}

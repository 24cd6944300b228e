package labeling

import (
	"errors"

	"github.com/google/uuid"
)

// Event tags, the event_tag of their outbox rows and the "type" billing receives.
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

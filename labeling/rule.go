// Package labeling is the producer half of the pair: organisations keep labeling
// rules, and every change of a rule's active state leaves exactly one event in the
// outbox, written in the same transaction as the change. Creates are replay-safe:
// the client chooses the rule's id, so a retried create never makes a duplicate.
package labeling

import (
	"errors"
	"fmt"
	"regexp"
	"regexp/syntax"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/infra/wire"
)

// Limits of a rule's fields, counted in characters (runes), not bytes.
// MaxPatternLen bounds the cost of compiling a pattern (RE2 compiles in time
// about linear in its length, but a 64 KiB pattern still costs about a second of
// CPU); a labeling rule has no use for anything near it.
const (
	MaxNameLen    = 200
	MaxLabelLen   = 100
	MaxPatternLen = 1000
)

// maxEchoLen is the most characters of a pattern an error message repeats.
const maxEchoLen = 64

// OrgID names an organisation. Its only constructor is ParseOrgID, so an OrgID
// in hand was decoded from a canonical, non-nil UUID.
type OrgID struct{ id uuid.UUID }

// RuleID names a rule, chosen by the client. Its only constructor is ParseRuleID,
// so a RuleID in hand was decoded from a canonical, non-nil UUID.
type RuleID struct{ id uuid.UUID }

// ParseOrgID decodes s; anything but a canonical non-nil UUID is fault.Invalid.
func ParseOrgID(s string) (OrgID, error) {
	id, err := parseID("orgId", s)
	return OrgID{id}, err
}

// ParseRuleID decodes s; anything but a canonical non-nil UUID is fault.Invalid.
func ParseRuleID(s string) (RuleID, error) {
	id, err := parseID("ruleId", s)
	return RuleID{id}, err
}

// UUID returns the id as a uuid.UUID.
func (o OrgID) UUID() uuid.UUID { return o.id }

// String returns the canonical lower-case form.
func (o OrgID) String() string { return o.id.String() }

// UUID returns the id as a uuid.UUID.
func (r RuleID) UUID() uuid.UUID { return r.id }

// String returns the canonical lower-case form.
func (r RuleID) String() string { return r.id.String() }

// parseID accepts only the 36-character hyphenated form: uuid.Parse also takes
// braces, urn:uuid: and bare hex, and one id with several spellings would make
// logs and client-side comparisons lie. The nil UUID is refused because no event
// carrying it would validate at the consumer.
func parseID(field, s string) (uuid.UUID, error) {
	if s == "" {
		return uuid.Nil, fault.Errorf(fault.Invalid, "%s is required", field)
	}
	id, err := wire.ParseID(s)
	switch {
	case errors.Is(err, wire.ErrNilID):
		return uuid.Nil, fault.Errorf(fault.Invalid, "%s must not be the nil UUID", field)
	case err != nil:
		return uuid.Nil, fault.Errorf(fault.Invalid, "%s must be a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)", field)
	}
	return id, nil
}

// Rule is a labeling rule as stored. Times are epoch milliseconds.
type Rule struct {
	ID        RuleID
	OrgID     OrgID
	Name      string
	Pattern   string
	Label     string
	Active    bool
	CreatedAt int64
	UpdatedAt int64
}

// NewRule is a validated create request; NewRuleFrom is its only constructor.
type NewRule struct {
	ID      RuleID
	Name    string
	Pattern string
	Label   string
}

// NewRuleFrom validates a create request's fields and returns the first problem
// as a fault.Invalid naming the field.
func NewRuleFrom(id, name, pattern, label string) (NewRule, error) {
	ruleID, err := parseID("id", id)
	if err != nil {
		return NewRule{}, err
	}
	if err := checkText("name", name, MaxNameLen); err != nil {
		return NewRule{}, err
	}
	if err := checkPattern(pattern); err != nil {
		return NewRule{}, err
	}
	if err := checkText("label", label, MaxLabelLen); err != nil {
		return NewRule{}, err
	}
	return NewRule{ID: RuleID{ruleID}, Name: name, Pattern: pattern, Label: label}, nil
}

// sameBody reports whether a stored rule is what create request n would store: the
// test that tells a replay from a conflict.
func (r Rule) sameBody(org OrgID, n NewRule) bool {
	return r.OrgID == org && r.ID == n.ID && r.Name == n.Name && r.Pattern == n.Pattern && r.Label == n.Label
}

// checkText also refuses NUL: PostgreSQL text cannot hold it, so letting it through
// would turn bad input into a 500. Invalid UTF-8 is refused for callers outside
// HTTP; encoding/json already replaced it with U+FFFD.
func checkText(field, s string, max int) error {
	n := utf8.RuneCountInString(s)
	switch {
	case n == 0:
		return fault.Errorf(fault.Invalid, "%s is required", field)
	case n > max:
		return fault.Errorf(fault.Invalid, "%s must be at most %d characters, got %d", field, max, n)
	case !utf8.ValidString(s):
		return fault.Errorf(fault.Invalid, "%s is not valid UTF-8", field)
	case strings.ContainsRune(s, 0):
		return fault.Errorf(fault.Invalid, "%s must not contain NUL characters", field)
	}
	return nil
}

func checkPattern(p string) error {
	switch n := utf8.RuneCountInString(p); {
	case p == "":
		return fault.Errorf(fault.Invalid, "pattern is required")
	case n > MaxPatternLen:
		// Checked before compiling: the length is what bounds the compile's cost.
		return fault.Errorf(fault.Invalid, "pattern must be at most %d characters, got %d", MaxPatternLen, n)
	case !utf8.ValidString(p):
		return fault.Errorf(fault.Invalid, "pattern is not valid UTF-8")
	case strings.ContainsRune(p, 0):
		return fault.Errorf(fault.Invalid, "pattern must not contain NUL characters; write \\x00 to match one")
	}
	if _, err := regexp.Compile(p); err != nil {
		msg := err.Error()
		var se *syntax.Error
		if errors.As(err, &se) {
			msg = fmt.Sprintf("%s: %q", se.Code, web.Clip(se.Expr, maxEchoLen))
		} else {
			msg = web.Clip(msg, maxEchoLen)
		}
		return fault.Errorf(fault.Invalid, "pattern is not a valid RE2 expression: %s", msg)
	}
	return nil
}

// timeLayout is RFC 3339 in UTC with exactly three fractional digits: the stored
// precision is milliseconds, and a fixed width keeps a replayed response
// byte-identical to the first one.
const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// FormatTime formats epoch milliseconds as an RFC 3339 UTC string.
func FormatTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format(timeLayout)
}

// Package wire is what both sides of the pair agree on byte for byte: the
// delivery envelope (contract section 4), which the outbox side encodes
// (infra/delivery over HTTP, infra/stream over NATS) and the inbox side
// decodes (infra/inbox), and the one spelling of an id on the wire, the
// canonical UUID; and how an error text quotes an operator's URL
// (RedactURL, RedactURLs, Scrubber: scheme://host/path, never its userinfo or
// query). It is its own package, importing only infra/fault, so that the
// producer side need not import the consumer's library (or the reverse) to
// share them.
package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/fault"
)

// Envelope is the delivery body of contract section 4:
// {"id","type","occurredAt","payload"}. The fields are pointers so that a
// decoder tells a missing field from a zero one; New fills them all. A
// consumer decodes it as a Received, which ignores a top-level member the
// envelope does not define (a producer may add one before every consumer
// knows it) but refuses one that names a field in another letter case; the
// payload is the producer's event, which evolves additively, and is left to
// the handler of its type.
type Envelope struct {
	ID         *string         `json:"id"`
	Type       *string         `json:"type"`
	OccurredAt *int64          `json:"occurredAt"`
	Payload    json.RawMessage `json:"payload"`
}

// New is the envelope of one event: its id (the consumer's dedup key), its
// type, when it occurred (epoch ms) and its payload.
func New(id uuid.UUID, typ string, occurredAt int64, payload json.RawMessage) Envelope {
	s := id.String()
	return Envelope{ID: &s, Type: &typ, OccurredAt: &occurredAt, Payload: payload}
}

// Encode is the envelope's JSON, the body both transports carry. Marshal
// re-reads the payload, compacting it: PostgreSQL's jsonb hands a row's
// payload back re-spaced, and the body's bytes are what a consumer reads and
// a NATS signature covers.
func (env Envelope) Encode() ([]byte, error) { return json.Marshal(env) }

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

// Received is an envelope as a consumer decodes it (infra/inbox, with
// infra/web's strict decoder: exact names, no duplicate, valid UTF-8, no
// NUL): the Envelope's fields, and Unknown, the top-level members it does
// not define, which the decoder keeps there instead of refusing them. Its
// Header ignores them, so the envelope can grow as the payload does, except
// a member whose name is a field's in another letter case ("ID", "Type"):
// that is refused, never taken for the field nor ignored beside it, because
// a decoder that matches names case-insensitively (Go's encoding/json)
// would read it as the field.
type Received struct {
	Envelope                           // embedded: its members are Received's
	Unknown  map[string]jsontext.Value `json:",embed"` // the fallback of every other member
}

// fieldNames are the envelope's members, as Envelope's tags spell them.
var fieldNames = []string{"id", "type", "occurredAt", "payload"}

// Header is Envelope.Header, refusing first, with a fault.Invalid, a
// member that names an envelope field in another letter case; any other
// unknown member is ignored.
func (r Received) Header() (uuid.UUID, string, error) {
	for name := range r.Unknown {
		for _, field := range fieldNames {
			if strings.EqualFold(name, field) {
				return uuid.Nil, "", fault.Errorf(fault.Invalid,
					"body: field %q is not %q: envelope names match exactly, in their letter case", Clip(name, 64), field)
			}
		}
	}
	return r.Envelope.Header()
}

func isObject(raw json.RawMessage) bool {
	return strings.HasPrefix(strings.TrimLeft(string(raw), " \t\r\n"), "{")
}

// ErrNilID is ParseID's error for the nil UUID, which is no id.
var ErrNilID = errors.New("the nil UUID is not an id")

// ParseUUID parses a UUID in its canonical 36-character form (either case).
// The braced, URN and hyphen-less forms uuid.Parse also accepts are refused,
// so that one id has one spelling on the wire, in logs and in commands. It
// is the one parser of ids in the module; ParseID adds the rule for ids.
func ParseUUID(s string) (uuid.UUID, error) {
	if len(s) != 36 {
		return uuid.Nil, fmt.Errorf("%q is not a UUID", Clip(s, 64))
	}
	return uuid.Parse(s)
}

// ParseID is ParseUUID refusing the nil UUID (ErrNilID): the contract's one
// rule for both services, no id is the nil UUID.
func ParseID(s string) (uuid.UUID, error) {
	id, err := ParseUUID(s)
	if err == nil && id == uuid.Nil {
		return uuid.Nil, ErrNilID
	}
	return id, err
}

// Clip bounds untrusted text echoed in a message to n characters.
func Clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n]) + "…"
}

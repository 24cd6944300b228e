package wire

import (
	"encoding/json"
	"fmt"
	"net/url"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/fault"
)

// Format is how a producer writes an event on the wire (EVENTS_FORMAT):
// every consumer of this module reads both, so a producer switches only
// after its consumers run a release that does (docs/operations.md,
// "Upgrading").
type Format string

const (
	// FormatEnvelope is the delivery envelope of contract section 4,
	// {"id","type","occurredAt","payload"}: the default.
	FormatEnvelope Format = "envelope"
	// FormatCloudEvents is CloudEvents 1.0 in binary content mode: the
	// attributes in ce- headers, the payload the body.
	FormatCloudEvents Format = "cloudevents"
)

// CloudEvents 1.0 names this module writes and reads.
const (
	// SpecVersion is the ce-specversion this module writes and the only one it reads.
	SpecVersion = "1.0"
	// ContentTypeStructured marks a structured-mode CloudEvent (the JSON
	// event format): over HTTP and NATS alike it is the content type that
	// tells a structured event from a binary one.
	ContentTypeStructured = "application/cloudevents+json"
	// ContentTypeJSON is the datacontenttype of every event this module
	// writes, and the only one it reads.
	ContentTypeJSON = "application/json"
	// HeaderPrefix starts every attribute's header in binary mode, over HTTP
	// and NATS.
	HeaderPrefix = "ce-"
)

// Binary-mode headers this module writes: HeaderPrefix and the attribute.
const (
	HeaderSpecVersion     = HeaderPrefix + "specversion"
	HeaderID              = HeaderPrefix + "id"
	HeaderType            = HeaderPrefix + "type"
	HeaderSource          = HeaderPrefix + "source"
	HeaderTime            = HeaderPrefix + "time"
	HeaderDataContentType = HeaderPrefix + "datacontenttype"
)

// Event is one delivered event, whatever format carried it: what the inbox
// decodes and applies.
type Event struct {
	ID         uuid.UUID // the dedup key: the envelope's id, or ce-id
	Type       string
	OccurredAt int64 // epoch ms: occurredAt, or ce-time
	Payload    json.RawMessage
}

// Event is the envelope's Event, checked as Header checks it.
func (r Received) Event() (Event, error) {
	id, typ, err := r.Header()
	if err != nil {
		return Event{}, err
	}
	return Event{ID: id, Type: typ, OccurredAt: *r.OccurredAt, Payload: r.Payload}, nil
}

// BinaryHeaders is the binary-mode attributes of an event, header name and
// value in the order written, each value percent-encoded as the HTTP and
// NATS protocol bindings say (Encode). The time is UTC with milliseconds, so
// it reads back as the same occurredAt.
func BinaryHeaders(id uuid.UUID, typ, source string, occurredAt int64) [][2]string {
	return [][2]string{
		{HeaderSpecVersion, SpecVersion},
		{HeaderID, id.String()},
		{HeaderType, Encode(typ)},
		{HeaderSource, Encode(source)},
		{HeaderTime, FormatTime(occurredAt)},
	}
}

// FormatTime is epoch ms as ce-time writes it: RFC 3339, UTC, milliseconds.
func FormatTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// Encode percent-encodes a header value as the CloudEvents HTTP and NATS
// bindings require: space, '"', '%' and every byte outside printable ASCII
// (U+0021 to U+007E) as %XX of its UTF-8 bytes; nothing else, so a value of
// printable ASCII alone (an id, a type, a time, a source like /labeling) is
// sent as it is and reads the same to a decoder that skips the step.
func Encode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c > '~' || c == '"' || c == '%' {
			fmt.Fprintf(&b, "%%%02X", c)
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Decode undoes Encode. A malformed escape or a result that is not valid
// UTF-8 is an error.
func Decode(s string) (string, error) {
	if !strings.Contains(s, "%") {
		return s, nil
	}
	v, err := url.PathUnescape(s)
	if err != nil || !utf8.ValidString(v) {
		return "", fmt.Errorf("%q is not percent-encoded UTF-8", Clip(s, 64))
	}
	return v, nil
}

// ReadBinary reads a binary-mode CloudEvent: its attributes through header
// (a lookup of one header by name, in the transport's way: HTTP's is
// case-insensitive), its data the payload. It refuses, with a fault.Invalid,
// a ce-specversion other than 1.0, a missing or malformed ce-id (a UUID, not
// the nil one), ce-type, ce-source or ce-time (RFC 3339, after the epoch),
// and a ce-datacontenttype other than application/json (the HTTP binding
// carries it in Content-Type, which the caller checks). Other ce- headers,
// extensions it does not know, are ignored.
func ReadBinary(header func(name string) string, payload json.RawMessage) (Event, error) {
	s := Structured{Data: payload}
	for _, a := range []struct {
		name string
		dst  **string
	}{{"specversion", &s.SpecVersion}, {"id", &s.ID}, {"type", &s.Type}, {"source", &s.Source}, {"time", &s.Time},
		{"datacontenttype", &s.DataContentType}} {
		raw := header(HeaderPrefix + a.name)
		if raw == "" {
			continue // absent: event says which are required
		}
		v, err := Decode(raw)
		if err != nil {
			return Event{}, fault.Errorf(fault.Invalid, "header %s%s: %v", HeaderPrefix, a.name, err)
		}
		*a.dst = &v
	}
	return s.event("header " + HeaderPrefix)
}

// Structured is a CloudEvent in the JSON event format (structured content
// mode, ContentTypeStructured), as a consumer decodes it with infra/web's
// strict decoder: its attributes, its data, and Unknown, the members it does
// not read (extensions), which are ignored, except one whose name is an
// attribute's in another letter case (refused, as for the envelope).
type Structured struct {
	SpecVersion     *string                   `json:"specversion"`
	ID              *string                   `json:"id"`
	Type            *string                   `json:"type"`
	Source          *string                   `json:"source"`
	Time            *string                   `json:"time"`
	DataContentType *string                   `json:"datacontenttype"`
	Data            json.RawMessage           `json:"data"`
	Unknown         map[string]jsontext.Value `json:",embed"`
}

// structuredNames are Structured's members.
var structuredNames = []string{"specversion", "id", "type", "source", "time", "datacontenttype", "data"}

// Event checks a structured CloudEvent as ReadBinary checks a binary one
// (data must be a JSON object; data_base64 is refused: the payload is JSON)
// and returns it.
func (s Structured) Event() (Event, error) {
	for name := range s.Unknown {
		if name == "data_base64" {
			return Event{}, fault.Errorf(fault.Invalid, "data_base64: the data must be a JSON object in data")
		}
		for _, field := range structuredNames {
			if strings.EqualFold(name, field) && name != field {
				return Event{}, fault.Errorf(fault.Invalid,
					"body: field %q is not %q: attribute names match exactly, in their letter case", Clip(name, 64), field)
			}
		}
	}
	return s.event("")
}

// event checks the attributes; where prefixes an attribute's name in a message.
func (s Structured) event(where string) (Event, error) {
	missing := func(name string, v *string) error {
		if v == nil || *v == "" {
			return fault.Errorf(fault.Invalid, "%s%s is required", where, name)
		}
		return nil
	}
	for _, a := range []struct {
		name string
		v    *string
	}{{"specversion", s.SpecVersion}, {"id", s.ID}, {"type", s.Type}, {"source", s.Source}, {"time", s.Time}} {
		if err := missing(a.name, a.v); err != nil {
			return Event{}, err
		}
	}
	if *s.SpecVersion != SpecVersion {
		return Event{}, fault.Errorf(fault.Invalid, "%sspecversion must be %s, got %q", where, SpecVersion, Clip(*s.SpecVersion, 64))
	}
	id, err := ParseID(*s.ID)
	if err != nil {
		return Event{}, fault.Errorf(fault.Invalid, "%sid must be a UUID", where)
	}
	at, err := time.Parse(time.RFC3339Nano, *s.Time)
	if err != nil || at.UnixMilli() <= 0 {
		return Event{}, fault.Errorf(fault.Invalid, "%stime must be an RFC 3339 time after the epoch", where)
	}
	if s.DataContentType != nil && !isJSONType(*s.DataContentType) {
		return Event{}, fault.Errorf(fault.Invalid, "%sdatacontenttype must be application/json, got %q", where, Clip(*s.DataContentType, 64))
	}
	if !isObject(s.Data) {
		return Event{}, fault.Errorf(fault.Invalid, "data must be a JSON object")
	}
	return Event{ID: id, Type: *s.Type, OccurredAt: at.UnixMilli(), Payload: s.Data}, nil
}

// isJSONType reports whether a content type is application/json, with or
// without parameters.
func isJSONType(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), ContentTypeJSON)
}

// IsStructured reports whether a content type is ContentTypeStructured,
// with or without parameters.
func IsStructured(ct string) bool {
	mt, _, _ := strings.Cut(ct, ";")
	return strings.EqualFold(strings.TrimSpace(mt), ContentTypeStructured)
}

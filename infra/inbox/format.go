package inbox

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/infra/wire"
)

// The formats an event arrives in, over HTTP and NATS alike: the envelope of
// contract section 4, or a CloudEvent in binary or structured content mode.
// Which one a message is follows the protocol bindings: a Content-Type of
// application/cloudevents+json is structured, whatever else it carries; a
// ce-specversion header otherwise is binary; neither is the envelope.
type format int

const (
	formatEnvelope format = iota
	formatBinary
	formatStructured
)

// formatOf is the format of a message by its content type and whether it
// has a ce-specversion header.
func formatOf(contentType string, specVersion bool) format {
	switch {
	case wire.IsStructured(contentType):
		return formatStructured
	case specVersion:
		return formatBinary
	}
	return formatEnvelope
}

// jsonEvent decodes a body that holds the whole event: a structured
// CloudEvent or the envelope, with the strict rules of contract section 4.
func jsonEvent(data []byte, structured bool) (wire.Event, error) {
	if structured {
		var s wire.Structured
		if err := web.Unmarshal(data, &s); err != nil {
			return wire.Event{}, fault.Errorf(fault.Invalid, "body is not a valid CloudEvent: %v", err)
		}
		return s.Event()
	}
	var env wire.Received
	if err := web.Unmarshal(data, &env); err != nil {
		return wire.Event{}, fault.Errorf(fault.Invalid, "body is not a valid event envelope: %v", err)
	}
	return env.Event()
}

// binaryEvent decodes a binary-mode CloudEvent: its attributes through
// header, its payload the body (one JSON object, under the same rules).
func binaryEvent(header func(string) string, data []byte) (wire.Event, error) {
	var payload json.RawMessage
	if err := web.Unmarshal(data, &payload); err != nil {
		return wire.Event{}, fault.Errorf(fault.Invalid, "body is not a valid event payload: %v", err)
	}
	return wire.ReadBinary(header, payload)
}

// natsHeader is a lookup of a NATS message's header: exact name first (the
// binding's are lowercase), then any letter case, as NATS keeps the case a
// publisher wrote.
func natsHeader(h nats.Header) func(string) string {
	return func(name string) string {
		if v := h[name]; len(v) > 0 {
			return v[0]
		}
		for k, v := range h {
			if len(v) > 0 && strings.EqualFold(k, name) {
				return v[0]
			}
		}
		return ""
	}
}

// natsSigned is what a NATS message's Events-Signature covers, and what its
// record keeps as payload: the body, or for a binary-mode CloudEvent
// stream.SignedCloudEvent of its ce-type, ce-time and body. A CloudEvent
// whose ce-type or ce-time cannot be read yields an error (its body is then
// recorded as it came).
func natsSigned(m stream.Message) (signed []byte, f format, err error) {
	get := natsHeader(m.Header)
	f = formatOf(get("Content-Type"), get(wire.HeaderSpecVersion) != "")
	if f == formatEnvelope && hasSpecVersion(m.Data) {
		// A structured CloudEvent without its Content-Type, as
		// cloudevents/sdk-go's NATS bindings send one.
		f = formatStructured
	}
	if f != formatBinary {
		return m.Data, f, nil
	}
	typ, terr := wire.Decode(get(wire.HeaderType))
	tm, merr := wire.Decode(get(wire.HeaderTime))
	if terr != nil || merr != nil || typ == "" || tm == "" {
		return m.Data, f, fault.Errorf(fault.Invalid, "CloudEvent without a readable %s and %s", wire.HeaderType, wire.HeaderTime)
	}
	return stream.SignedCloudEvent(typ, tm, m.Data), f, nil
}

// natsEvent decodes a NATS message of format f whose signature verified.
func natsEvent(m stream.Message, f format) (wire.Event, error) {
	if f == formatBinary {
		return binaryEvent(natsHeader(m.Header), m.Data)
	}
	return jsonEvent(m.Data, f == formatStructured)
}

// recordEvent decodes the payload of a billing_nats_failed record (what
// natsSigned returned): stream.SignedCloudEvent's bytes of a binary-mode
// CloudEvent, whose id is the record's Nats-Msg-Id, or a JSON body, a
// structured CloudEvent when it has a specversion member.
func recordEvent(f NATSFailed) (wire.Event, error) {
	trimmed := strings.TrimLeft(string(f.Payload), " \t\r\n")
	if !strings.HasPrefix(trimmed, "{") {
		typ, tm, body, ok := stream.ParseSignedCloudEvent(f.Payload)
		if !ok {
			return wire.Event{}, fault.Errorf(fault.Invalid, "body is not a valid event envelope")
		}
		attrs := map[string]string{
			wire.HeaderSpecVersion: wire.SpecVersion, wire.HeaderID: f.MsgID, wire.HeaderType: wire.Encode(typ),
			wire.HeaderSource: "-", wire.HeaderTime: wire.Encode(tm),
		}
		return binaryEvent(func(name string) string { return attrs[name] }, body)
	}
	return jsonEvent(f.Payload, hasSpecVersion(f.Payload))
}

// hasSpecVersion reports whether a JSON body has a specversion member: a
// structured CloudEvent, which the envelope never is. It tells the two apart
// where no Content-Type does (a record; a NATS message sent without one).
func hasSpecVersion(data []byte) bool {
	if !bytes.Contains(data, []byte(`"specversion"`)) {
		return false // the envelope's common case, without a second parse
	}
	var probe struct {
		SpecVersion *json.RawMessage `json:"specversion"`
	}
	return json.Unmarshal(data, &probe) == nil && probe.SpecVersion != nil
}

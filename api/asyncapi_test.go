package api_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-openapi/jsonpointer"
	"github.com/google/uuid"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
	"go.yaml.in/yaml/v3"

	"github.com/acme/outboxpair/api"
	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/delivery"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/webhook"
	"github.com/acme/outboxpair/infra/wire"
	"github.com/acme/outboxpair/labeling"
)

// specSchema is the official JSON Schema of AsyncAPI 3.0.0, bundled with its
// definitions (testdata/README.md says where it comes from), and specID its $id.
const (
	specSchema = "testdata/asyncapi-3.0.0.schema.json"
	specID     = "http://asyncapi.com/definitions/3.0.0/asyncapi.json"
	// docURL is the URL asyncapi.yaml is known by to the schema compiler, so
	// that a location in it (docURL + "#/components/schemas/Id") compiles
	// with its references resolved. Nothing is fetched from it.
	docURL = "https://outboxpair.invalid/api/asyncapi.yaml"
)

// The formats a message is tagged with (its tags name its transport and its
// format).
const (
	envelope   = "envelope"
	binary     = "cloudevents-binary"
	structured = "cloudevents-structured"
)

// asyncJSON is api/asyncapi.yaml as JSON: YAML decoded by go.yaml.in/yaml/v3,
// encoded again as JSON, so that its numbers and maps are JSON's.
func asyncJSON(t *testing.T) []byte {
	t.Helper()
	var y any
	require.NoError(t, yaml.Unmarshal(api.AsyncAPI, &y), "api/asyncapi.yaml is not YAML")
	b, err := json.Marshal(y)
	require.NoError(t, err, "api/asyncapi.yaml does not convert to JSON (a map with a non-string key?)")
	return b
}

// asyncDoc is api/asyncapi.yaml as JSON values, what a JSON Schema validates
// and a JSON pointer walks.
func asyncDoc(t *testing.T) any {
	t.Helper()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(asyncJSON(t)))
	require.NoError(t, err)
	return doc
}

// ref is a Reference Object.
type ref struct {
	Ref string `json:"$ref"`
}

// asyncAPI is the part of the document the test reads as Go values: the
// operations, the channels and the messages.
type asyncAPI struct {
	Channels map[string]struct {
		Address    *string `json:"address"`
		Parameters map[string]struct {
			Enum []string `json:"enum"`
		} `json:"parameters"`
		Messages map[string]ref `json:"messages"`
	} `json:"channels"`
	Operations map[string]struct {
		Action   string `json:"action"`
		Channel  ref    `json:"channel"`
		Messages []ref  `json:"messages"`
	} `json:"operations"`
	Components struct {
		Messages map[string]asyncMessage `json:"messages"`
	} `json:"components"`
}

// asyncMessage is a Message Object: its name is the event type, and its tags
// name its transport and its format.
type asyncMessage struct {
	Name string `json:"name"`
	Tags []struct {
		Name string `json:"name"`
	} `json:"tags"`
}

func asyncSpec(t *testing.T) asyncAPI {
	t.Helper()
	var spec asyncAPI
	require.NoError(t, json.Unmarshal(asyncJSON(t), &spec))
	return spec
}

// TestAsyncAPIIsValidAsyncAPI300 validates the document against the official
// AsyncAPI 3.0.0 JSON Schema, and checks that each of its references
// resolves (the spec's schema does not follow them).
func TestAsyncAPIIsValidAsyncAPI300(t *testing.T) {
	t.Parallel()
	doc := asyncDoc(t)

	t.Run("valid against the AsyncAPI 3.0.0 schema", func(t *testing.T) {
		t.Parallel()
		f, err := os.Open(specSchema)
		require.NoError(t, err)
		defer f.Close()
		spec, err := jsonschema.UnmarshalJSON(f)
		require.NoError(t, err)
		c := jsonschema.NewCompiler()
		require.NoError(t, c.AddResource(specID, spec))
		sch, err := c.Compile(specID)
		require.NoError(t, err)
		require.NoError(t, sch.Validate(doc), "api/asyncapi.yaml is not a valid AsyncAPI 3.0.0 document")
	})

	t.Run("every reference resolves", func(t *testing.T) {
		t.Parallel()
		refs := refsIn(doc)
		require.NotEmpty(t, refs)
		for _, r := range refs {
			_, err := resolve(doc, r)
			require.NoError(t, err, "$ref %q", r)
		}
	})
}

// walk calls fn on every object of v, depth first.
func walk(v any, fn func(map[string]any)) {
	switch v := v.(type) {
	case map[string]any:
		fn(v)
		for _, k := range slices.Sorted(maps.Keys(v)) {
			walk(v[k], fn)
		}
	case []any:
		for _, e := range v {
			walk(e, fn)
		}
	}
}

// resolve returns what the local reference ref ("#/a/b") points to in doc,
// following a reference that points to a reference.
func resolve(doc any, ref string) (map[string]any, error) {
	for range 10 {
		ptr, ok := strings.CutPrefix(ref, "#")
		if !ok {
			return nil, &refError{ref, "is not a reference within the document"}
		}
		p, err := jsonpointer.New(ptr)
		if err != nil {
			return nil, err
		}
		v, _, err := p.Get(doc)
		if err != nil {
			return nil, err
		}
		m, ok := v.(map[string]any)
		if !ok {
			return nil, &refError{ref, "points to no object"}
		}
		next, ok := m["$ref"].(string)
		if !ok {
			return m, nil
		}
		ref = next
	}
	return nil, &refError{ref, "is a chain of more than 10 references"}
}

type refError struct{ ref, why string }

func (e *refError) Error() string { return "$ref " + e.ref + " " + e.why }

// The types the code has: labeling's (labeling.Events()), billing's
// (billing.Events()) and the one billing sends the provider.
func labelingTypes() []string { return labeling.Tags(labeling.Events()) }

func billingTypes() []string {
	var types []string
	for _, h := range billing.Events() {
		types = append(types, h.Type())
	}
	return types
}

var providerTypes = []string{billing.QuotaChangedTag}

// pairs are the (format, type) pairs of formats × types, sorted.
func pairs(formats, types []string) []string {
	var out []string
	for _, f := range formats {
		for _, typ := range types {
			out = append(out, f+" "+typ)
		}
	}
	slices.Sort(out)
	return out
}

// TestAsyncAPIHasAMessageForEveryType holds the document's messages to the
// code both ways: each operation carries a message for every type its
// service has, in every format it sends or reads, and none for a type the
// service lacks; every message names a type the code has.
func TestAsyncAPIHasAMessageForEveryType(t *testing.T) {
	t.Parallel()
	spec := asyncSpec(t)

	// Each operation: the formats and types it must carry, exactly.
	want := map[string]struct {
		action  string
		formats []string
		types   []string
	}{
		"deliverOverHttp": {"send", []string{envelope, binary}, labelingTypes()},
		"publishOverNats": {"send", []string{envelope, binary}, labelingTypes()},
		"receiveOverHttp": {"receive", []string{envelope, binary, structured}, billingTypes()},
		"consumeFromNats": {"receive", []string{envelope, binary, structured}, billingTypes()},
		"callProvider":    {"send", []string{envelope}, providerTypes},
	}
	require.ElementsMatch(t, slices.Collect(maps.Keys(want)), slices.Collect(maps.Keys(spec.Operations)),
		"the document's operations are not the ones this test checks: add a new operation to want")

	carried := map[string]bool{} // the keys of components.messages the operations carry
	for name, w := range want {
		op := spec.Operations[name]
		require.Equal(t, w.action, op.Action, "operation %s", name)
		var got []string
		for _, m := range op.Messages {
			key := carriedMessage(t, spec, name, m)
			carried[key] = true
			msg := spec.Components.Messages[key]
			got = append(got, messageFormat(t, key, msg)+" "+msg.Name)
		}
		slices.Sort(got)
		t.Run(name+" carries a message for every type of its service", func(t *testing.T) {
			t.Parallel()
			require.Equal(t, pairs(w.formats, w.types), got,
				"operation %s: its messages (format and type) are not the types its service has in code; "+
					"adding an event type means adding its messages to api/asyncapi.yaml (docs/events.md)", name)
		})
	}

	t.Run("the NATS subject's parameter lists labeling's types", func(t *testing.T) {
		t.Parallel()
		ch := spec.Channels["labelingEvents"]
		require.NotNil(t, ch.Address)
		require.Equal(t, stream.SubjectPrefix+"{type}", *ch.Address)
		require.ElementsMatch(t, labelingTypes(), ch.Parameters["type"].Enum)
	})

	t.Run("every message names a type the code has and is carried", func(t *testing.T) {
		t.Parallel()
		known := slices.Concat(labelingTypes(), billingTypes(), providerTypes)
		for key, msg := range spec.Components.Messages {
			require.Contains(t, known, msg.Name, "message %s names a type no code has", key)
			require.True(t, carried[key], "message %s is in no operation", key)
		}
	})
}

// carriedMessage is the key in components.messages of the message m of
// operation op: a reference to a message of the operation's channel, which
// is a reference to components.messages.
func carriedMessage(t *testing.T, spec asyncAPI, op string, m ref) string {
	t.Helper()
	chKey, ok := strings.CutPrefix(spec.Operations[op].Channel.Ref, "#/channels/")
	require.True(t, ok, "operation %s: its channel is no reference to channels", op)
	ch, ok := spec.Channels[chKey]
	require.True(t, ok, "operation %s: no channel %s", op, chKey)
	msgKey, ok := strings.CutPrefix(m.Ref, "#/channels/"+chKey+"/messages/")
	require.True(t, ok, "operation %s: message %s is not one of its channel's", op, m.Ref)
	key, ok := strings.CutPrefix(ch.Messages[msgKey].Ref, "#/components/messages/")
	require.True(t, ok, "channel %s: message %s is no reference to components.messages", chKey, msgKey)
	_, ok = spec.Components.Messages[key]
	require.True(t, ok, "channel %s: no message %s in components.messages", chKey, key)
	return key
}

// messageFormat is the format msg's tags name: exactly one of envelope,
// cloudevents-binary, cloudevents-structured.
func messageFormat(t *testing.T, key string, msg asyncMessage) string {
	t.Helper()
	var formats []string
	for _, tag := range msg.Tags {
		if tag.Name == envelope || tag.Name == binary || tag.Name == structured {
			formats = append(formats, tag.Name)
		}
	}
	require.Len(t, formats, 1, "message %s: its tags must name one format", key)
	return formats[0]
}

// schemas compiles locations of api/asyncapi.yaml as JSON Schemas (draft 7,
// which AsyncAPI's Schema Object extends), formats asserted (uuid,
// date-time, uri-reference). A compiler is not safe for concurrent use, so
// compiling is serialised; a compiled schema validates concurrently.
type schemas struct {
	mu *sync.Mutex
	c  *jsonschema.Compiler
}

func newSchemas(t *testing.T) schemas {
	t.Helper()
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	c.AssertFormat()
	require.NoError(t, c.AddResource(docURL, asyncDoc(t)))
	return schemas{new(sync.Mutex), c}
}

// validate checks the JSON value v (bytes, or a value marshalled first)
// against the schema at ptr ("/components/schemas/Id").
func (s schemas) validate(t *testing.T, ptr string, v any) error {
	t.Helper()
	s.mu.Lock()
	sch, err := s.c.Compile(docURL + "#" + ptr)
	s.mu.Unlock()
	require.NoError(t, err, "compile %s", ptr)
	b, ok := v.([]byte)
	if !ok {
		b, err = json.Marshal(v)
		require.NoError(t, err)
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err)
	return sch.Validate(inst)
}

// message is the location of a message of the document.
func message(key string) string { return "/components/messages/" + key }

// captured is one request a test server got.
type captured struct {
	header http.Header
	body   []byte
}

// recorder is an HTTP server that answers 204 and keeps each request.
func recorder(t *testing.T) (*httptest.Server, func() []captured) {
	t.Helper()
	var mu sync.Mutex
	var got []captured
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, captured{r.Header.Clone(), body})
		mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	// Each caller gets its own copies: a test adds trace headers to the one it
	// found while a parallel test reads the others.
	return srv, func() []captured {
		mu.Lock()
		defer mu.Unlock()
		out := make([]captured, len(got))
		for i, c := range got {
			out[i] = captured{c.header.Clone(), c.body}
		}
		return out
	}
}

// headerSet is a header as the document's header schemas spell it: each
// name written as the schema at ptr lists it (HTTP names are
// case-insensitive), one value a name.
func headerSet(t *testing.T, doc any, ptr string, h http.Header) map[string]string {
	t.Helper()
	sch, err := resolve(doc, "#"+ptr)
	require.NoError(t, err)
	var names []string
	walk(sch, func(m map[string]any) {
		if props, ok := m["properties"].(map[string]any); ok {
			names = slices.AppendSeq(names, maps.Keys(props))
		}
	})
	for _, ref := range refsIn(sch) {
		target, err := resolve(doc, ref)
		require.NoError(t, err)
		if props, ok := target["properties"].(map[string]any); ok {
			names = slices.AppendSeq(names, maps.Keys(props))
		}
	}
	out := map[string]string{}
	for k, vs := range h {
		name := strings.ToLower(k)
		for _, n := range names {
			if strings.EqualFold(n, k) {
				name = n
			}
		}
		out[name] = vs[0]
	}
	return out
}

// refsIn are the references within v.
func refsIn(v any) []string {
	var refs []string
	walk(v, func(m map[string]any) {
		if r, ok := m["$ref"].(string); ok {
			refs = append(refs, r)
		}
	})
	return refs
}

// traceContext is a W3C trace context as the OpenTelemetry propagator the
// services use writes it.
func traceContext(t *testing.T, h http.Header) {
	t.Helper()
	sc := trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: trace.TraceID{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16},
		SpanID:  trace.SpanID{1, 2, 3, 4, 5, 6, 7, 8}, TraceFlags: trace.FlagsSampled,
	})
	ts, err := trace.ParseTraceState("vendor=value")
	require.NoError(t, err)
	ctx := trace.ContextWithSpanContext(context.Background(), sc.WithTraceState(ts))
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(h))
	require.NotEmpty(t, h.Get("traceparent"))
}

// eventSamples are one event of each type the code has, as Go values: what
// labeling appends (its events' types) and what billing appends for the
// provider (QuotaChanged, a change and a catch-up's row).
func eventSamples() (labelingEvents map[string]outbox.Event, quotaChanges []billing.QuotaChanged) {
	org, rule := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	return map[string]outbox.Event{
			labeling.TagRuleActivated:   labeling.RuleActivated{OrgID: org, RuleID: rule},
			labeling.TagRuleDeactivated: labeling.RuleDeactivated{OrgID: org, RuleID: rule},
		}, []billing.QuotaChanged{
			{OrgID: org, ActiveRules: 3, SourceEventID: uuid.Must(uuid.NewV7()), Version: 7},
			{OrgID: org, ActiveRules: -1, SourceEventID: uuid.Must(uuid.NewV7()), Version: 2},
			{OrgID: org, ActiveRules: 2, Version: 1}, // a catch-up's row: no sourceEventId
		}
}

// TestAsyncAPIValidatesWhatTheCodeSends validates what the code produces
// against the document: each payload labeling appends, delivered by the
// relay's own HTTP client (its envelope and headers) and as the NATS and
// CloudEvents header sets; each QuotaChanged billing appends, as the
// provider call the webhook client makes.
func TestAsyncAPIValidatesWhatTheCodeSends(t *testing.T) {
	t.Parallel()
	doc := asyncDoc(t)
	s := newSchemas(t)
	events, quotaChanges := eventSamples()
	require.ElementsMatch(t, labelingTypes(), slices.Collect(maps.Keys(events)),
		"eventSamples has no sample of a type of labeling.Events(): add one")

	const token = "events-token"
	srv, requests := recorder(t)
	client, err := delivery.New(delivery.Config{BaseURL: srv.URL, Token: token}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	// Bound as cmd/labeling's serve binds them: each type's Publication (which
	// decodes and validates the row first) sends through the HTTP client.
	subs := map[string]outbox.Subscriber{}
	for _, sub := range labeling.Subscribers(labeling.Events(), client.Deliver) {
		subs[sub.Tag] = sub
	}
	// The same with EVENTS_FORMAT=cloudevents.
	ceClient, err := delivery.New(delivery.Config{BaseURL: srv.URL, Token: token, Format: wire.FormatCloudEvents},
		slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	ceSubs := map[string]outbox.Subscriber{}
	for _, sub := range labeling.Subscribers(labeling.Events(), ceClient.Deliver) {
		ceSubs[sub.Tag] = sub
	}

	for tag, event := range events {
		t.Run(tag+" validates in every format and transport", func(t *testing.T) {
			t.Parallel()
			// outbox.Append's encoding of the event, the row's payload.
			payload, err := json.Marshal(event)
			require.NoError(t, err)
			require.NoError(t, s.validate(t, "/components/schemas/"+tag, payload))
			m := outbox.Message{ID: uuid.Must(uuid.NewV7()), Tag: tag, Payload: payload,
				CreatedAt: time.Now().UnixMilli(), Attempt: 1}

			// HTTP, envelope: the request the relay makes.
			require.NoError(t, subs[tag].Handle(context.Background(), m))
			var req captured
			for _, r := range requests() {
				if r.header.Get("Idempotency-Key") == m.ID.String() {
					req = r
				}
			}
			require.NotNil(t, req.body, "no request for %s", m.ID)
			traceContext(t, req.header)
			msg := message("httpEnvelope" + tag)
			require.NoError(t, s.validate(t, msg+"/payload", req.body))
			require.NoError(t, s.validate(t, msg+"/headers", headerSet(t, doc, msg+"/headers", req.header)))

			// NATS, envelope: the body and headers infra/stream publishes.
			body, err := delivery.Envelope(m)
			require.NoError(t, err)
			require.Equal(t, req.body, body, "HTTP and NATS carry one envelope")
			subject := stream.Subject(tag)
			natsHeader := map[string]string{
				"Nats-Msg-Id":          m.ID.String(),
				stream.SignatureHeader: stream.Sign([]byte(token), subject, m.ID.String(), body),
			}
			msg = message("natsEnvelope" + tag)
			require.NoError(t, s.validate(t, msg+"/payload", body))
			require.NoError(t, s.validate(t, msg+"/headers", natsHeader))

			// CloudEvents, binary mode (EVENTS_FORMAT=cloudevents): the
			// attributes in ce- headers, the body the payload, as the relay's
			// client sends it.
			m.ID = uuid.Must(uuid.NewV7()) // another request to find
			require.NoError(t, ceSubs[tag].Handle(context.Background(), m))
			req = captured{}
			for _, r := range requests() {
				if r.header.Get("Idempotency-Key") == m.ID.String() {
					req = r
				}
			}
			require.NotNil(t, req.body, "no request for %s", m.ID)
			traceContext(t, req.header)
			msg = message("httpBinary" + tag)
			require.NoError(t, s.validate(t, msg+"/payload", req.body))
			require.NoError(t, s.validate(t, msg+"/headers", headerSet(t, doc, msg+"/headers", req.header)))

			// NATS, binary mode: the headers infra/stream writes.
			natsCE := map[string]string{
				"Nats-Msg-Id":              m.ID.String(),
				wire.HeaderDataContentType: wire.ContentTypeJSON,
			}
			for _, h := range wire.BinaryHeaders(m.ID, tag, delivery.Source, m.CreatedAt) {
				natsCE[h[0]] = h[1]
			}
			ceTime := natsCE[wire.HeaderTime]
			natsCE[stream.SignatureHeader] = stream.Sign([]byte(token), subject, m.ID.String(),
				stream.SignedCloudEvent(tag, ceTime, payload))
			msg = message("natsBinary" + tag)
			require.NoError(t, s.validate(t, msg+"/payload", payload))
			require.NoError(t, s.validate(t, msg+"/headers", natsCE))

			// CloudEvents, structured mode, which billing reads too.
			structuredEvent := map[string]any{"specversion": "1.0", "id": m.ID.String(), "type": tag,
				"source": "/labeling", "time": ceTime, "datacontenttype": "application/json",
				"data": json.RawMessage(payload)}
			msg = message("httpStructured" + tag)
			require.NoError(t, s.validate(t, msg+"/payload", structuredEvent))
			require.NoError(t, s.validate(t, msg+"/headers", map[string]string{
				"Authorization": "Bearer " + token, "Content-Type": wire.ContentTypeStructured}))
			structuredBody, err := json.Marshal(structuredEvent)
			require.NoError(t, err)
			msg = message("natsStructured" + tag)
			require.NoError(t, s.validate(t, msg+"/payload", structuredEvent))
			require.NoError(t, s.validate(t, msg+"/headers", map[string]string{
				"Nats-Msg-Id": m.ID.String(), stream.SignatureHeader: stream.Sign([]byte(token), subject, m.ID.String(), structuredBody),
				"Content-Type": wire.ContentTypeStructured}))
		})
	}

	t.Run("QuotaChanged validates as the provider call", func(t *testing.T) {
		t.Parallel()
		psrv, calls := recorder(t)
		secret := func(b byte) string { return "whsec_" + base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{b}, 32)) }
		// Two secrets, as during a rotation: two signatures in the header.
		provider, err := webhook.New(webhook.Config{URL: psrv.URL + "/webhook", Secrets: []string{secret(1), secret(2)}},
			slog.New(slog.DiscardHandler))
		require.NoError(t, err)
		call := webhook.Subscriber[billing.QuotaChanged](provider)
		for _, q := range quotaChanges {
			require.NoError(t, q.Validate())
			// quotaChangedRows' encoding, the row's payload.
			payload, err := json.Marshal(q)
			require.NoError(t, err)
			require.NoError(t, s.validate(t, "/components/schemas/"+billing.QuotaChangedTag, payload))
			m := outbox.Message{ID: uuid.Must(uuid.NewV7()), Tag: billing.QuotaChangedTag, Payload: payload,
				CreatedAt: time.Now().UnixMilli(), Attempt: 1}
			require.NoError(t, call.Handle(context.Background(), m))
		}
		got := calls()
		require.Len(t, got, len(quotaChanges))
		msg := message("providerQuotaChanged")
		for _, c := range got {
			require.Contains(t, c.header.Get("webhook-signature"), " ", "one signature per secret")
			traceContext(t, c.header)
			require.NoError(t, s.validate(t, msg+"/payload", c.body))
			require.NoError(t, s.validate(t, msg+"/headers", headerSet(t, doc, msg+"/headers", c.header)))
		}
	})
}

// TestAsyncAPISchemasRefuse checks that the schemas are not vacuous: each
// refuses what the code never sends and billing or the provider refuses.
func TestAsyncAPISchemasRefuse(t *testing.T) {
	t.Parallel()
	s := newSchemas(t)
	id := uuid.Must(uuid.NewV7()).String()
	nilID := uuid.Nil.String()
	for _, c := range []struct {
		name, ptr string
		v         any
	}{
		{"a payload without ruleId", "/components/schemas/RuleActivated", map[string]any{"orgId": id}},
		{"the nil UUID as orgId", "/components/schemas/RuleActivated", map[string]any{"orgId": nilID, "ruleId": id}},
		{"a braced UUID", "/components/schemas/RuleDeactivated", map[string]any{"orgId": "{" + id + "}", "ruleId": id}},
		{"a change without its source event", "/components/schemas/QuotaChanged",
			map[string]any{"orgId": id, "activeRules": 1, "version": 2}},
		{"version 0", "/components/schemas/QuotaChanged",
			map[string]any{"orgId": id, "activeRules": 1, "sourceEventId": id, "version": 0}},
		{"an envelope of another type", message("httpEnvelopeRuleActivated") + "/payload",
			map[string]any{"id": id, "type": "RuleDeactivated", "occurredAt": 1, "payload": map[string]any{"orgId": id, "ruleId": id}}},
		{"an envelope at occurredAt 0", message("natsEnvelopeRuleDeactivated") + "/payload",
			map[string]any{"id": id, "type": "RuleDeactivated", "occurredAt": 0, "payload": map[string]any{"orgId": id, "ruleId": id}}},
		{"a delivery without its token", message("httpEnvelopeRuleActivated") + "/headers",
			map[string]any{"Content-Type": "application/json", "Idempotency-Key": id}},
		{"a CloudEvent of another type", message("httpBinaryRuleActivated") + "/headers",
			map[string]any{"Authorization": "Bearer t", "Content-Type": "application/json", "Idempotency-Key": id,
				"ce-specversion": "1.0", "ce-id": id, "ce-type": "RuleDeactivated", "ce-source": "/labeling", "ce-time": "2026-12-04T13:05:00.123Z"}},
		{"a CloudEvent at a time that is no RFC 3339", message("natsBinaryRuleActivated") + "/headers",
			map[string]any{"Nats-Msg-Id": id, "Events-Signature": "v1=" + strings.Repeat("ab", 32), "ce-specversion": "1.0",
				"ce-id": id, "ce-type": "RuleActivated", "ce-source": "/labeling", "ce-time": "1733317500123", "ce-datacontenttype": "application/json"}},
		{"an unsigned NATS message", message("natsEnvelopeRuleActivated") + "/headers", map[string]any{"Nats-Msg-Id": id}},
		{"an uppercase-hex signature", message("natsEnvelopeRuleActivated") + "/headers",
			map[string]any{"Nats-Msg-Id": id, "Events-Signature": "v1=" + strings.Repeat("AB", 32)}},
	} {
		t.Run("refuses "+c.name, func(t *testing.T) {
			t.Parallel()
			require.Error(t, s.validate(t, c.ptr, c.v))
		})
	}
}

// payloadTypes are the Go types whose JSON is each type's payload.
var payloadTypes = map[string]reflect.Type{
	labeling.TagRuleActivated:   reflect.TypeFor[labeling.RuleActivated](),
	labeling.TagRuleDeactivated: reflect.TypeFor[labeling.RuleDeactivated](),
	billing.QuotaChangedTag:     reflect.TypeFor[billing.QuotaChanged](),
}

// TestAsyncAPIPayloadSchemasAreTheGoTypes checks each payload schema against
// its Go type's struct tags: the same fields, no more, no fewer; and a
// required property is a field the type always writes (no omitempty or
// omitzero).
func TestAsyncAPIPayloadSchemasAreTheGoTypes(t *testing.T) {
	t.Parallel()
	doc := asyncDoc(t)
	types := slices.Concat(labelingTypes(), billingTypes(), providerTypes)
	for _, typ := range types {
		require.Contains(t, payloadTypes, typ, "payloadTypes has no Go type for %s: add it", typ)
	}
	for typ, goType := range payloadTypes {
		t.Run(typ+" has the Go type's fields", func(t *testing.T) {
			t.Parallel()
			sch, err := resolve(doc, "#/components/schemas/"+typ)
			require.NoError(t, err, "api/asyncapi.yaml has no payload schema %s", typ)
			fields, always := jsonFields(goType)
			props := slices.Collect(maps.Keys(sch["properties"].(map[string]any)))
			require.ElementsMatch(t, fields, props,
				"schema %s lists other properties than the JSON fields of %s", typ, goType)
			for _, r := range sch["required"].([]any) {
				require.Contains(t, always, r, "schema %s requires %v, which %s may omit", typ, r, goType)
			}
		})
	}
}

// jsonFields are the JSON names of t's exported fields, and those it always
// writes (no omitempty or omitzero).
func jsonFields(t reflect.Type) (names, always []string) {
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		names = append(names, name)
		if !slices.ContainsFunc(strings.Split(opts, ","), func(o string) bool { return o == "omitempty" || o == "omitzero" }) {
			always = append(always, name)
		}
	}
	return names, always
}

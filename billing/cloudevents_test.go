package billing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	natsce "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	ce "github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/delivery"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/wire"
	"github.com/acme/outboxpair/internal/testsupport/apitest"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/inboxtest"
)

// TestCloudEventsInterop holds the pair to cloudevents/sdk-go, the CNCF's Go
// SDK, both ways on both transports: what labeling sends with
// EVENTS_FORMAT=cloudevents, sdk-go decodes to the same event; what sdk-go
// encodes, billing applies once.
//
// sdk-go's NATS bindings (protocol/nats_jetstream/v2 v2.16.2) diverge from
// the NATS protocol binding in three ways (sdk-go#1334); what each means here:
//   - It decides binary mode by ce-specversion alone, not by the content
//     type. Labeling never sends ce-specversion beside a structured body, so
//     nothing is worked around.
//   - It neither percent-encodes nor decodes header values. Every value
//     labeling sends (a UUID, a type, /labeling, an RFC 3339 time) holds no
//     character the binding encodes, so the two agree; the test checks that
//     wire.Encode leaves each as it is. Billing decodes, which leaves sdk-go's
//     values unchanged for the same reason.
//   - Its structured mode sends no Content-Type header, which the binding
//     uses to mark a structured event. Billing recognises one by its
//     specversion member instead (no workaround in the test).
//
// It also reads an unprefixed content-type as datacontenttype in binary mode,
// while it writes ce-datacontenttype as the binding says: labeling writes
// ce-datacontenttype, which sdk-go reads as well (checked below).
// Events-Signature is this module's, not CloudEvents': the test signs what
// sdk-go encodes as labeling would (stream.Sign over
// stream.SignedCloudEvent), since billing applies nothing unsigned.
func TestCloudEventsInterop(t *testing.T) {
	t.Parallel()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	t.Run("sdk-go decodes what labeling sends over HTTP", func(t *testing.T) {
		t.Parallel()
		got := make(chan *ce.Event, 1)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			ev, err := cehttp.NewEventFromHTTPRequest(r)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			require.Equal(t, "Bearer "+token, r.Header.Get("Authorization"))
			require.Equal(t, ev.ID(), r.Header.Get("Idempotency-Key"))
			got <- ev
			w.WriteHeader(http.StatusNoContent)
		}))
		t.Cleanup(srv.Close)
		c, err := delivery.New(delivery.Config{BaseURL: srv.URL, Token: token, Format: wire.FormatCloudEvents}, logger)
		require.NoError(t, err)
		m := rowOf(activation(uuid.New()))
		require.NoError(t, c.Deliver(context.Background(), m))
		requireSameEvent(t, m, <-got)

		// Under a span (the relay's process span, tracing on), the trace
		// travels as the distributed-tracing extension too.
		sc := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 2, 3}, SpanID: trace.SpanID{4, 5},
			TraceFlags: trace.FlagsSampled})
		m = rowOf(activation(uuid.New()))
		require.NoError(t, c.Deliver(trace.ContextWithSpanContext(context.Background(), sc), m))
		ev := <-got
		requireSameEvent(t, m, ev)
		require.Equal(t, "00-01020300000000000000000000000000-0405000000000000-01", ev.Extensions()["traceparent"])
	})

	t.Run("sdk-go decodes what labeling publishes over NATS, and billing applies it", func(t *testing.T) {
		t.Parallel()
		// A second durable keeps each message for sdk-go after billing acks it.
		p := setupPairWith(t, func(c *stream.PublisherConfig) {
			c.Format = wire.FormatCloudEvents
			c.Consumers = append(c.Consumers, "sdkgo")
		})
		org := uuid.New()
		m := p.publish(t, activation(org))
		msg := p.fetch(t, "sdkgo")
		for name, v := range msg.Header {
			if strings.HasPrefix(name, wire.HeaderPrefix) {
				require.Equal(t, v[0], wire.Encode(v[0]), "%s needs percent-encoding, which sdk-go would not decode", name)
			}
		}
		ev, err := binding.ToEvent(context.Background(), natsce.NewMessage(msg))
		require.NoError(t, err)
		requireSameEvent(t, m, ev)
		require.Eventually(t, func() bool { n := p.activeRules(t, org); return n != nil && *n == 1 },
			10*time.Second, 20*time.Millisecond, "billing applies labeling's CloudEvent")
	})

	for _, mode := range []string{"binary", "structured"} {
		t.Run("billing applies once what sdk-go encodes over HTTP in "+mode+" mode", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, sqldb.Postgres))
			org := uuid.New()
			ev := sdkEvent(t, org)
			ctx := context.Background()
			if mode == "structured" {
				ctx = binding.WithForceStructured(ctx)
			}
			for range 2 {
				req := httptest.NewRequest(http.MethodPost, inboxtest.Path, nil)
				require.NoError(t, cehttp.WriteRequest(ctx, binding.ToMessage(ev), req))
				req.Header.Set("Authorization", "Bearer "+token)
				if mode == "structured" {
					require.Equal(t, wire.ContentTypeStructured, req.Header.Get("Content-Type"))
				} else {
					require.Equal(t, "1.0", req.Header.Get("Ce-Specversion"))
				}
				rec := b.deliverRequest(t, req)
				require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
			}
			require.EqualValues(t, 1, *b.activeRules(t, org))
			require.True(t, b.hasReceipt(t, ev.ID()))
		})

		t.Run("billing applies once what sdk-go encodes over NATS in "+mode+" mode", func(t *testing.T) {
			t.Parallel()
			p := setupPair(t)
			org := uuid.New()
			ev := sdkEvent(t, org)
			ctx := context.Background()
			if mode == "structured" {
				ctx = binding.WithForceStructured(ctx)
			}
			var body bytes.Buffer
			header, err := natsce.WriteMsg(ctx, binding.ToMessage(ev), &body)
			require.NoError(t, err)
			msg := nats.NewMsg(stream.Subject(billing.RuleActivated))
			msg.Header, msg.Data = nats.Header{}, body.Bytes()
			for k, v := range header {
				msg.Header[k] = v
			}
			signed := msg.Data
			if mode == "binary" {
				require.Equal(t, "1.0", msg.Header.Get(wire.HeaderSpecVersion))
				signed = stream.SignedCloudEvent(msg.Header.Get(wire.HeaderType), msg.Header.Get(wire.HeaderTime), msg.Data)
			} else {
				require.Empty(t, msg.Header.Get("Content-Type"), "sdk-go now marks structured mode: drop the note above")
			}
			msg.Header.Set(stream.SignatureHeader, stream.Sign([]byte(token), msg.Subject, ev.ID(), signed))
			// An interest stream drops a message no durable is there to want:
			// publish once billing's durable exists, as labeling's publisher does.
			require.Eventually(t, func() bool {
				_, err := p.js.Consumer(context.Background(), stream.Name, billing.Durable)
				return err == nil
			}, 15*time.Second, 20*time.Millisecond, "billing's durable exists")
			for range 2 { // the second is absorbed by the stream's duplicate window
				_, err = p.js.PublishMsg(context.Background(), msg, jetstream.WithMsgID(ev.ID()))
				require.NoError(t, err)
			}
			require.Eventually(t, func() bool { n := p.activeRules(t, org); return n != nil && *n == 1 },
				10*time.Second, 20*time.Millisecond, "billing applies sdk-go's CloudEvent")
			require.Zero(t, p.count(t, "billing_nats_failed"))
		})
	}
}

// rowOf is an outbox row of RuleActivated with payload, as the relay hands it over.
func rowOf(payload string) outbox.Message {
	return outbox.Message{ID: uuid.Must(uuid.NewV7()), Tag: billing.RuleActivated, Payload: json.RawMessage(payload),
		CreatedAt: time.Now().UnixMilli(), Attempt: 1}
}

// requireSameEvent checks that ev, as sdk-go decoded it, is row m.
func requireSameEvent(t *testing.T, m outbox.Message, ev *ce.Event) {
	t.Helper()
	require.NoError(t, ev.Validate())
	require.Equal(t, ce.CloudEventsVersionV1, ev.SpecVersion())
	require.Equal(t, m.ID.String(), ev.ID())
	require.Equal(t, m.Tag, ev.Type())
	require.Equal(t, delivery.Source, ev.Source())
	require.Equal(t, m.CreatedAt, ev.Time().UnixMilli())
	require.Equal(t, wire.ContentTypeJSON, ev.DataContentType())
	require.JSONEq(t, string(m.Payload), string(ev.Data()))
}

// sdkEvent is a RuleActivated for org as a team using sdk-go would build it.
func sdkEvent(t *testing.T, org uuid.UUID) *ce.Event {
	t.Helper()
	ev := ce.New()
	ev.SetID(uuid.Must(uuid.NewV7()).String())
	ev.SetType(billing.RuleActivated)
	ev.SetSource("/sdk-go")
	ev.SetTime(time.Now())
	ev.SetExtension("partitionkey", org.String()) // an extension billing does not know
	require.NoError(t, ev.SetData(ce.ApplicationJSON, map[string]string{"orgId": org.String(), "ruleId": uuid.NewString()}))
	return &ev
}

// deliverRequest sends req, a delivery built by the caller, through the API
// (and the OpenAPI check).
func (b *bundle) deliverRequest(t testing.TB, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	return apitest.Do(t, b.e, req)
}

// fetch is the next message of durable, as a *nats.Msg for sdk-go.
func (p *pair) fetch(t *testing.T, durable string) *nats.Msg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := p.js.Consumer(ctx, stream.Name, durable)
	require.NoError(t, err)
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	for msg := range batch.Messages() {
		require.NoError(t, msg.Ack())
		return &nats.Msg{Subject: msg.Subject(), Header: msg.Headers(), Data: msg.Data()}
	}
	require.NoError(t, batch.Error())
	t.Fatal("no message")
	return nil
}

// ceRequest is a binary-mode CloudEvent delivery of RuleActivated for org, as
// labeling sends it with EVENTS_FORMAT=cloudevents, edited by edit.
func ceRequest(id uuid.UUID, org uuid.UUID, at time.Time, edit ...func(*http.Request)) *http.Request {
	body := `{"orgId":"` + org.String() + `","ruleId":"` + uuid.NewString() + `"}`
	return inboxtest.Request(body, append([]func(*http.Request){func(r *http.Request) {
		for _, h := range wire.BinaryHeaders(id, billing.RuleActivated, delivery.Source, at.UnixMilli()) {
			r.Header.Set(h[0], h[1])
		}
		r.Header.Set("Idempotency-Key", id.String())
	}}, edit...)...)
}

func TestCloudEventsDelivery(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("a binary event with percent-encoded attributes and unknown extensions is applied once", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org, id := uuid.New(), uuid.Must(uuid.NewV7())
			for range 2 {
				rec := b.deliver(t, "", func(r *http.Request) {
					*r = *ceRequest(id, org, time.Now(), func(r *http.Request) {
						r.Header.Set(wire.HeaderType, "Rule%41ctivated")
						r.Header.Set("ce-partitionkey", "a%20b")
						r.Header.Set("ce-traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
					})
				})
				require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
			}
			require.EqualValues(t, 1, *b.activeRules(t, org))
			require.True(t, b.hasReceipt(t, id.String()))
		})

		now := time.Now()
		cases := []struct {
			name   string
			edit   func(*http.Request)
			status int
		}{
			{"a specversion other than 1.0", func(r *http.Request) { r.Header.Set(wire.HeaderSpecVersion, "0.3") }, http.StatusBadRequest},
			{"no ce-time", func(r *http.Request) { r.Header.Del(wire.HeaderTime) }, http.StatusBadRequest},
			{"a ce-time that is not RFC 3339", func(r *http.Request) { r.Header.Set(wire.HeaderTime, "yesterday") }, http.StatusBadRequest},
			{"no ce-source", func(r *http.Request) { r.Header.Del(wire.HeaderSource) }, http.StatusBadRequest},
			{"a ce-id that is not a UUID", func(r *http.Request) { r.Header.Set(wire.HeaderID, "42"); r.Header.Del("Idempotency-Key") }, http.StatusBadRequest},
			{"an Idempotency-Key other than ce-id", func(r *http.Request) { r.Header.Set("Idempotency-Key", uuid.NewString()) }, http.StatusBadRequest},
			{"a malformed percent-encoding", func(r *http.Request) { r.Header.Set(wire.HeaderType, "Rule%zz") }, http.StatusBadRequest},
			{"a payload that is not an object", func(r *http.Request) {
				r.Body, r.ContentLength = io.NopCloser(strings.NewReader(`[1]`)), 3
			}, http.StatusBadRequest},
			{"a ce-time older than the receipts' retention allows", func(r *http.Request) {
				r.Header.Set(wire.HeaderTime, wire.FormatTime(now.Add(-time.Hour).UnixMilli()))
			}, http.StatusBadRequest},
			{"a Content-Type other than JSON", func(r *http.Request) { r.Header.Set("Content-Type", "text/plain") }, http.StatusUnsupportedMediaType},
		}
		for _, c := range cases {
			t.Run(c.name+" is refused and applies nothing", func(t *testing.T) {
				t.Parallel()
				b := setup(t, freshDB(t, d), billing.RefuseOlderThan(time.Hour))
				org := uuid.New()
				req := ceRequest(uuid.Must(uuid.NewV7()), org, now, c.edit)
				rec := httptest.NewRecorder()
				b.e.ServeHTTP(rec, req)
				require.Equal(t, c.status, rec.Code, rec.Body.String())
				require.Nil(t, b.activeRules(t, org))
				require.Zero(t, b.count(t, "billing_receipts"))
			})
		}

		structured := func(mutate func(m map[string]any)) string {
			m := map[string]any{"specversion": "1.0", "id": uuid.NewString(), "type": billing.RuleActivated,
				"source": "/x", "time": now.Format(time.RFC3339Nano),
				"data": map[string]string{"orgId": uuid.NewString(), "ruleId": uuid.NewString()}}
			mutate(m)
			raw, err := json.Marshal(m)
			require.NoError(t, err)
			return string(raw)
		}
		for name, body := range map[string]string{
			"data_base64 instead of data": structured(func(m map[string]any) { delete(m, "data"); m["data_base64"] = "e30=" }),
			"an ID beside id":             structured(func(m map[string]any) { m["ID"] = uuid.NewString() }),
			"no time":                     structured(func(m map[string]any) { delete(m, "time") }),
			"a datacontenttype not JSON":  structured(func(m map[string]any) { m["datacontenttype"] = "text/xml" }),
		} {
			t.Run("a structured event with "+name+" is refused and applies nothing", func(t *testing.T) {
				t.Parallel()
				b := setup(t, freshDB(t, d))
				rec := httptest.NewRecorder()
				b.e.ServeHTTP(rec, inboxtest.Request(body, func(r *http.Request) {
					r.Header.Set("Content-Type", wire.ContentTypeStructured)
					r.Header.Del("Idempotency-Key")
				}))
				require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
				require.Zero(t, b.count(t, "billing_receipts"))
			})
		}
	})
}

func TestCloudEventsSigned(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		// binaryMsg is a binary-mode CloudEvent over NATS for org, signed with key.
		binaryMsg := func(key string, org uuid.UUID) stream.Message {
			id := uuid.Must(uuid.NewV7())
			h := nats.Header{}
			for _, kv := range wire.BinaryHeaders(id, billing.RuleActivated, delivery.Source, time.Now().UnixMilli()) {
				h[kv[0]] = []string{kv[1]}
			}
			body := []byte(activation(org))
			m := stream.Message{Subject: natsSubject, MsgID: id.String(), Data: body, Header: h, Sequence: 1,
				Stored: time.Now(), Delivered: 1}
			m.Signature = stream.Sign([]byte(key), natsSubject, m.MsgID, stream.SignedCloudEvent(billing.RuleActivated, h.Get(wire.HeaderTime), body))
			return m
		}

		t.Run("a CloudEvent whose ce-time changed after signing is recorded, never applied", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			m := binaryMsg(token, org)
			m.Header[wire.HeaderTime] = []string{wire.FormatTime(time.Now().Add(time.Minute).UnixMilli())}
			require.True(t, terminated(b.handler(t, 0)(context.Background(), m)))
			require.Nil(t, b.activeRules(t, org))
			require.Equal(t, 1, b.count(t, "billing_nats_failed"))
		})

		t.Run("a CloudEvent signed by a key billing learns later is applied by a replay of its record", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			require.True(t, terminated(b.handler(t, 0)(context.Background(), binaryMsg("a-later-token", org))))
			require.Nil(t, b.activeRules(t, org))
			rep, err := b.svc.ReplayNATSFailed(context.Background(), [][]byte{[]byte("a-later-token")}, nil)
			require.NoError(t, err)
			require.Equal(t, 1, rep.Replayed, "%+v", rep)
			require.EqualValues(t, 1, *b.activeRules(t, org))
			require.Zero(t, b.count(t, "billing_nats_failed"))
		})
	})
}

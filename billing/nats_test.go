package billing_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

const natsSubject = "labeling.events.RuleActivated"

// natsMsg is a first delivery of body under msgID, signed with token as labeling signs.
func natsMsg(seq uint64, msgID, body string) stream.Message {
	return stream.Message{Subject: natsSubject, MsgID: msgID, Data: []byte(body), Sequence: seq,
		Stored: time.Unix(1767225600, int64(seq)), Delivered: 1,
		Signature: stream.Sign([]byte(token), natsSubject, msgID, []byte(body))}
}

func terminated(err error) bool { return stream.IsTerminal(err) }

// handler is billing's stream handler keyed with the test's token.
func (b *bundle) handler(t testing.TB, maxDeliveries uint64) stream.Handler {
	t.Helper()
	h, err := b.svc.NATSHandler(billing.NATSConfig{Key: []byte(token), MaxDeliveries: maxDeliveries})
	require.NoError(t, err)
	return h
}

func signatureRejects(t *testing.T) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "billing_nats_signature_rejected_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

func TestHandleNATS(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("applies a message once, a redelivery is acked and changes nothing", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			handle := b.handler(t, 0)
			org := uuid.New()
			ev := newEvent(billing.RuleActivated, org)
			for range 3 {
				require.NoError(t, handle(context.Background(), natsMsg(1, ev.ID, ev.body())))
			}
			require.EqualValues(t, 1, *b.activeRules(t, org))
			require.True(t, b.hasReceipt(t, ev.ID))
			require.Zero(t, b.count(t, "billing_nats_failed"))
		})

		t.Run("applies a message with unknown envelope fields once, as the envelope grows", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			handle := b.handler(t, 0)
			org := uuid.New()
			ev := newEvent(billing.RuleActivated, org)
			body := strings.Replace(ev.body(), `{`, `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","source":{"v":2},`, 1)
			for range 3 {
				require.NoError(t, handle(context.Background(), natsMsg(1, ev.ID, body)))
			}
			require.EqualValues(t, 1, *b.activeRules(t, org))
			require.True(t, b.hasReceipt(t, ev.ID))
			require.Zero(t, b.count(t, "billing_nats_failed"))
		})

		bad := map[string]stream.Message{
			"malformed JSON": natsMsg(7, "", `{"id":`),
			"an envelope field in another case beside it": natsMsg(8, "", strings.Replace(
				newEvent(billing.RuleActivated, uuid.New()).body(), `"type"`, `"Type":"RuleDeactivated","type"`, 1)),
			"an envelope field in another case instead of it": natsMsg(11, "", strings.Replace(
				newEvent(billing.RuleActivated, uuid.New()).body(), `"id"`, `"Id"`, 1)),
			"invalid payload":              natsMsg(9, "", `{"id":"`+uuid.NewString()+`","type":"RuleActivated","occurredAt":1,"payload":{"orgId":"nope","ruleId":"nope"}}`),
			"msg id other than the body's": natsMsg(10, uuid.NewString(), newEvent(billing.RuleActivated, uuid.New()).body()),
		}
		for name, m := range bad {
			t.Run("terminates and records "+name+" with its reason", func(t *testing.T) {
				t.Parallel()
				b := setup(t, freshDB(t, d))
				handle := b.handler(t, 0)
				err := handle(context.Background(), m)
				require.True(t, terminated(err), "got %v", err)
				require.True(t, terminated(handle(context.Background(), m)), "a redelivery of it too")
				rows, err := billing.ListNATSFailed(context.Background(), b.db.DB)
				require.NoError(t, err)
				require.Len(t, rows, 1, "a redelivery is recorded once")
				require.Equal(t, m.Sequence, rows[0].StreamSeq)
				require.Equal(t, m.Stored.UnixNano(), rows[0].StoredAt)
				require.Equal(t, m.Data, rows[0].Payload)
				require.Equal(t, m.Subject, rows[0].Subject)
				require.NotEmpty(t, rows[0].Reason)
				require.NotContains(t, rows[0].Reason, "signature", "signed by labeling: refused for what it says")
				require.Zero(t, b.count(t, "billing_receipts"), "nothing applied")
			})
		}

		t.Run("records a message at a sequence already recorded but stored at another time (a recreated stream)", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			handle := b.handler(t, 0)
			first, second := natsMsg(1, "", `{`), natsMsg(1, "", `{"id":`)
			second.Stored = first.Stored.Add(time.Hour)
			require.True(t, terminated(handle(context.Background(), first)))
			require.True(t, terminated(handle(context.Background(), second)))
			rows, err := billing.ListNATSFailed(context.Background(), b.db.DB)
			require.NoError(t, err)
			require.Len(t, rows, 2, "both messages at sequence 1 are recorded")
			require.Equal(t, first.Data, rows[0].Payload)
			require.Equal(t, second.Data, rows[1].Payload)
		})

		forged := func(key string) func(m stream.Message) stream.Message {
			return func(m stream.Message) stream.Message {
				m.Signature = stream.Sign([]byte(key), m.Subject, m.MsgID, m.Data)
				return m
			}
		}
		unsigned := map[string]func(m stream.Message) stream.Message{
			"unsigned":                  func(m stream.Message) stream.Message { m.Signature = ""; return m },
			"signed with another key":   forged("not-the-events-token"),
			"signed with no key":        forged(""),
			"a signature of another id": func(m stream.Message) stream.Message { m.MsgID = uuid.NewString(); return m },
			"a signature of another subject": func(m stream.Message) stream.Message {
				m.Subject = "labeling.events.RuleDeactivated"
				return m
			},
			"a body altered under its signature": func(m stream.Message) stream.Message {
				m.Data = append([]byte(nil), m.Data...)
				m.Data[len(m.Data)-3] = ' '
				return m
			},
			"an uppercase signature": func(m stream.Message) stream.Message {
				m.Signature = "v1=" + upper(m.Signature[3:])
				return m
			},
			"another scheme": func(m stream.Message) stream.Message { m.Signature = "v2=" + m.Signature[3:]; return m },
		}
		for name, edit := range unsigned {
			t.Run("records and never applies a message "+name+", for its signature", func(t *testing.T) {
				t.Parallel()
				b := setup(t, freshDB(t, d))
				handle := b.handler(t, 0)
				org := uuid.New()
				ev := newEvent(billing.RuleActivated, org)
				m := edit(natsMsg(5, ev.ID, ev.body()))
				before := signatureRejects(t)
				err := handle(context.Background(), m)
				require.True(t, terminated(err), "got %v", err)
				require.Nil(t, b.activeRules(t, org), "not applied")
				require.Zero(t, b.count(t, "billing_receipts"))
				rows, err := billing.ListNATSFailed(context.Background(), b.db.DB)
				require.NoError(t, err)
				require.Len(t, rows, 1)
				require.Contains(t, rows[0].Reason, "signature")
				require.Equal(t, m.MsgID, rows[0].MsgID)
				require.Greater(t, signatureRejects(t), before, "counted")
			})
		}

		t.Run("replayed under a new msg id, a signed event is recorded for its signature and applied only once", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			handle := b.handler(t, 0)
			org := uuid.New()
			ev := newEvent(billing.RuleActivated, org)
			signed := natsMsg(1, ev.ID, ev.body())
			require.NoError(t, handle(context.Background(), signed))
			replay := signed
			replay.Sequence, replay.MsgID = 2, uuid.NewString() // past the broker's duplicate window
			require.True(t, terminated(handle(context.Background(), replay)))
			require.EqualValues(t, 1, *b.activeRules(t, org))
			rows, err := billing.ListNATSFailed(context.Background(), b.db.DB)
			require.NoError(t, err)
			require.Len(t, rows, 1)
			require.Contains(t, rows[0].Reason, "signature")
		})

		t.Run("records and terminates a message whose subject and msg id are not UTF-8, byte for byte with its signature", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			handle := b.handler(t, 0)
			org := uuid.New()
			ev := newEvent(billing.RuleActivated, org)
			m := natsMsg(3, "\xff\xfe-"+ev.ID, ev.body())
			m.Subject = "labeling.events.\xc3\x28"
			m.Signature = stream.Sign([]byte(token), m.Subject, m.MsgID, m.Data)
			err := handle(context.Background(), m)
			require.True(t, terminated(err), "got %v", err)
			require.Nil(t, b.activeRules(t, org), "not applied")
			rows, err := billing.ListNATSFailed(context.Background(), b.db.DB)
			require.NoError(t, err)
			require.Len(t, rows, 1)
			require.Equal(t, m.Subject, rows[0].Subject)
			require.Equal(t, m.MsgID, rows[0].MsgID)
			require.NotNil(t, rows[0].Signature)
			require.Equal(t, m.Signature, *rows[0].Signature)
			require.NoError(t, stream.Verify([]byte(token), rows[0].Subject, rows[0].MsgID, rows[0].Payload, *rows[0].Signature),
				"the record verifies again")
			require.True(t, terminated(handle(context.Background(), m)), "a redelivery is terminated again")
			rows, err = billing.ListNATSFailed(context.Background(), b.db.DB)
			require.NoError(t, err)
			require.Len(t, rows, 1, "and recorded once")
		})

		t.Run("records an unsigned message with an empty signature, not none", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			ev := newEvent(billing.RuleActivated, uuid.New())
			m := natsMsg(4, ev.ID, ev.body())
			m.Signature = ""
			require.True(t, terminated(b.handler(t, 0)(context.Background(), m)))
			rows, err := billing.ListNATSFailed(context.Background(), b.db.DB)
			require.NoError(t, err)
			require.Len(t, rows, 1)
			require.NotNil(t, rows[0].Signature, "a record since 00004 always says what signature came")
			require.Empty(t, *rows[0].Signature)
		})

		t.Run("needs a key", func(t *testing.T) {
			t.Parallel()
			_, err := setup(t, freshDB(t, d)).svc.NATSHandler(billing.NATSConfig{})
			require.ErrorContains(t, err, "EVENTS_TOKEN")
		})

		t.Run("naks an unknown type without a record or a receipt", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			ev := newEvent("RuleRenamed", uuid.New())
			err := b.handler(t, 0)(context.Background(), natsMsg(3, ev.ID, ev.body()))
			require.Error(t, err)
			require.False(t, terminated(err))
			require.Equal(t, fault.NotImplemented, fault.CodeOf(err))
			require.Zero(t, b.count(t, "billing_nats_failed"))
			require.Zero(t, b.count(t, "billing_receipts"))
		})

		t.Run("records and terminates a message still failing at its last delivery", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			handle := b.handler(t, 5)
			ev := newEvent("RuleRenamed", uuid.New())
			m := natsMsg(3, ev.ID, ev.body())
			m.Delivered = 4
			require.False(t, terminated(handle(context.Background(), m)), "before the bound: naked")
			require.Zero(t, b.count(t, "billing_nats_failed"))
			m.Delivered = 5
			require.True(t, terminated(handle(context.Background(), m)), "at the bound: terminated")
			rows, err := billing.ListNATSFailed(context.Background(), b.db.DB)
			require.NoError(t, err)
			require.Len(t, rows, 1)
			require.Contains(t, rows[0].Reason, "gave up after 5 deliveries")
			require.EqualValues(t, 5, rows[0].Deliveries)
		})

		t.Run("naks when the database is down, recording nothing", func(t *testing.T) {
			t.Parallel()
			b := setup(t, onPool(unreachable(t)))
			handle := b.handler(t, 1)
			ev := newEvent(billing.RuleActivated, uuid.New())
			err := handle(context.Background(), natsMsg(4, ev.ID, ev.body()))
			require.Equal(t, fault.Unavailable, fault.CodeOf(err), "past the bound too: the record could not be written")
			err = handle(context.Background(), natsMsg(5, "", `{`))
			require.Equal(t, fault.Unavailable, fault.CodeOf(err), "the record could not be written: the message must come back")
			unsigned := natsMsg(6, "", `{`)
			unsigned.Signature = ""
			err = handle(context.Background(), unsigned)
			require.Equal(t, fault.Unavailable, fault.CodeOf(err), "an unsigned one too")
		})
	})
}

func upper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'f' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}

package billing_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/stream"
)

func natsMsg(seq uint64, msgID, body string) stream.Message {
	return stream.Message{Subject: "labeling.events.RuleActivated", MsgID: msgID, Data: []byte(body), Sequence: seq, Delivered: 1}
}

func terminated(err error) bool { return stream.IsTerminal(err) }

func TestHandleNATS(t *testing.T) {
	t.Parallel()

	t.Run("applies a message once, a redelivery is acked and changes nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		org := uuid.New()
		ev := newEvent(billing.RuleActivated, org)
		for range 3 {
			require.NoError(t, b.svc.HandleNATS(context.Background(), natsMsg(1, ev.ID, ev.body())))
		}
		require.EqualValues(t, 1, *b.activeRules(t, org))
		require.True(t, b.hasReceipt(t, ev.ID))
		require.Zero(t, b.count(t, "billing_nats_failed"))
	})

	bad := map[string]stream.Message{
		"malformed JSON":               natsMsg(7, "", `{"id":`),
		"unknown envelope field":       natsMsg(8, "", `{"id":"x","extra":1}`),
		"invalid payload":              natsMsg(9, "", `{"id":"`+uuid.NewString()+`","type":"RuleActivated","occurredAt":1,"payload":{"orgId":"nope","ruleId":"nope"}}`),
		"msg id other than the body's": natsMsg(10, uuid.NewString(), newEvent(billing.RuleActivated, uuid.New()).body()),
	}
	for name, m := range bad {
		t.Run("terminates and records "+name+" with its reason", func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			err := b.svc.HandleNATS(context.Background(), m)
			require.True(t, terminated(err), "got %v", err)
			require.True(t, terminated(b.svc.HandleNATS(context.Background(), m)), "a redelivery of it too")
			rows, err := billing.ListNATSFailed(context.Background(), b.pool)
			require.NoError(t, err)
			require.Len(t, rows, 1, "recorded once per stream sequence")
			require.Equal(t, m.Sequence, rows[0].StreamSeq)
			require.Equal(t, m.Data, rows[0].Payload)
			require.Equal(t, m.Subject, rows[0].Subject)
			require.NotEmpty(t, rows[0].Reason)
			require.Zero(t, b.count(t, "billing_receipts"), "nothing applied")
		})
	}

	t.Run("naks an unknown type without a record or a receipt", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ev := newEvent("RuleRenamed", uuid.New())
		err := b.svc.HandleNATS(context.Background(), natsMsg(3, ev.ID, ev.body()))
		require.Error(t, err)
		require.False(t, terminated(err))
		require.Equal(t, fault.NotImplemented, fault.CodeOf(err))
		require.Zero(t, b.count(t, "billing_nats_failed"))
		require.Zero(t, b.count(t, "billing_receipts"))
	})

	t.Run("naks when the database is down, recording nothing", func(t *testing.T) {
		t.Parallel()
		b := setupPool(t, unreachable(t))
		ev := newEvent(billing.RuleActivated, uuid.New())
		err := b.svc.HandleNATS(context.Background(), natsMsg(4, ev.ID, ev.body()))
		require.Equal(t, fault.Unavailable, fault.CodeOf(err))
		err = b.svc.HandleNATS(context.Background(), natsMsg(5, "", `{`))
		require.Equal(t, fault.Unavailable, fault.CodeOf(err), "the record could not be written: the message must come back")
	})
}

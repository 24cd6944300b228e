package labeling

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
)

func TestEvents(t *testing.T) {
	t.Parallel()
	org, rule := uuid.New(), uuid.New()

	t.Run("the payload is exactly orgId and ruleId", func(t *testing.T) {
		t.Parallel()
		want := `{"orgId":"` + org.String() + `","ruleId":"` + rule.String() + `"}`
		for _, e := range []outbox.Event{RuleActivated{OrgID: org, RuleID: rule}, RuleDeactivated{OrgID: org, RuleID: rule}} {
			raw, err := json.Marshal(e)
			require.NoError(t, err)
			require.Equal(t, want, string(raw))
		}
		require.Equal(t, "RuleActivated", RuleActivated{}.EventTag())
		require.Equal(t, "RuleDeactivated", RuleDeactivated{}.EventTag())
	})

	t.Run("a subscriber fails a payload without both ids permanently", func(t *testing.T) {
		t.Parallel()
		called := 0
		sub := outbox.Subscribe(func(context.Context, outbox.Message, RuleDeactivated) error { called++; return nil })
		for _, payload := range []string{
			`{"orgId":"` + org.String() + `"}`,
			`{"ruleId":"` + rule.String() + `"}`,
			`{"orgId":"` + uuid.Nil.String() + `","ruleId":"` + rule.String() + `"}`,
		} {
			err := sub.Handle(context.Background(), outbox.Message{Tag: sub.Tag, Payload: json.RawMessage(payload)})
			require.True(t, outbox.IsPermanent(err), payload)
		}
		require.Zero(t, called)

		valid := `{"orgId":"` + org.String() + `","ruleId":"` + rule.String() + `"}`
		require.NoError(t, sub.Handle(context.Background(), outbox.Message{Tag: sub.Tag, Payload: json.RawMessage(valid)}))
		require.Equal(t, 1, called)
	})

	t.Run("one list gives each transport one subscriber per event, carried by its send", func(t *testing.T) {
		t.Parallel()
		var sent []string
		send := func(_ context.Context, m outbox.Message) error { sent = append(sent, m.Tag); return nil }
		subs := Subscribers(Events(), send)
		tags := make([]string, len(subs))
		for i, sub := range subs {
			tags[i] = sub.Tag
		}
		require.ElementsMatch(t, []string{TagRuleActivated, TagRuleDeactivated}, tags, "every tag the use cases append")

		valid := json.RawMessage(`{"orgId":"` + org.String() + `","ruleId":"` + rule.String() + `"}`)
		for _, sub := range subs {
			require.NoError(t, sub.Handle(context.Background(), outbox.Message{Tag: sub.Tag, Payload: valid}))
			err := sub.Handle(context.Background(), outbox.Message{Tag: sub.Tag, Payload: json.RawMessage(`{}`)})
			require.True(t, outbox.IsPermanent(err), "a row no consumer could apply fails before it is sent")
		}
		require.ElementsMatch(t, tags, sent, "each valid row sent once, by the one transport")
	})
}

package stream_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

func streamInfo(t *testing.T, js jetstream.JetStream) *jetstream.StreamInfo {
	t.Helper()
	st, err := js.Stream(context.Background(), stream.Name)
	require.NoError(t, err)
	info, err := st.Info(context.Background())
	require.NoError(t, err)
	return info
}

func publishN(t *testing.T, p *stream.Publisher, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		m := message("RuleActivated")
		ids[i] = m.ID.String()
		publishUntil(t, p, m)
	}
	return ids
}

func TestRetention(t *testing.T) {
	t.Parallel()

	t.Run("a message waits for a durable away longer than any retention, and goes once it is acked", func(t *testing.T) {
		t.Parallel()
		s := natsServer(t, "", "")
		p := publisher(t, s.ClientURL())
		ids := publishN(t, p, 10) // billing's durable exists (the publisher made it), nobody reads it
		js := client(t, s.ClientURL())
		info := streamInfo(t, js)
		require.Equal(t, jetstream.InterestPolicy, info.Config.Retention)
		require.Zero(t, info.Config.MaxAge, "no age drops what billing has not had")
		require.Equal(t, jetstream.DiscardNew, info.Config.Discard, "were a limit ever set, new messages are refused, old ones never dropped")
		require.EqualValues(t, 10, info.State.Msgs)

		// The old stream dropped messages at OUTBOX_PROCESSED_RETENTION. Nothing
		// here depends on time: the stream has no age limit left to wait for.
		r := &recorder{}
		consumer(t, s.ClientURL(), "billing", r)
		for _, id := range ids {
			eventually(t, func() bool { return len(r.deliveries(id)) == 1 }, "delivered after the absence: "+id)
		}
		eventually(t, func() bool { return streamInfo(t, js).State.Msgs == 0 }, "removed once acked: what is consumed is not kept")
	})

	t.Run("a second durable keeps its messages after billing consumed them", func(t *testing.T) {
		t.Parallel()
		s := natsServer(t, "", "")
		p := publisher(t, s.ClientURL(), "billing", "audit")
		a := &recorder{}
		consumer(t, s.ClientURL(), "billing", a)
		ids := publishN(t, p, 5)
		for _, id := range ids {
			eventually(t, func() bool { return len(a.deliveries(id)) == 1 }, "billing got "+id)
		}
		js := client(t, s.ClientURL())
		eventually(t, func() bool {
			ci, err := js.Consumer(context.Background(), stream.Name, "billing")
			require.NoError(t, err)
			return ci.CachedInfo().AckFloor.Stream == 5
		}, "billing acked all")
		require.EqualValues(t, 5, streamInfo(t, js).State.Msgs, "kept for audit, which has not read them")

		b := &recorder{}
		consumer(t, s.ClientURL(), "audit", b)
		for _, id := range ids {
			eventually(t, func() bool { return len(b.deliveries(id)) == 1 }, "audit got "+id)
		}
		eventually(t, func() bool { return streamInfo(t, js).State.Msgs == 0 }, "removed once both acked")
	})

	t.Run("a terminated message is removed like an acked one", func(t *testing.T) {
		t.Parallel()
		s := natsServer(t, "", "")
		p := publisher(t, s.ClientURL())
		r := &recorder{answer: func(stream.Message) error { return stream.Terminate(errors.New("poison")) }}
		consumer(t, s.ClientURL(), "billing", r)
		publishN(t, p, 3)
		js := client(t, s.ClientURL())
		eventually(t, func() bool { return streamInfo(t, js).State.Msgs == 0 }, "terms end the interest")
	})

	t.Run("a durable deleted is recreated before it misses more than a check", func(t *testing.T) {
		t.Parallel()
		s := natsServer(t, "", "")
		cfg := publisherConfig(s.ClientURL())
		cfg.CheckEvery = 100 * time.Millisecond
		p := startPublisher(t, cfg)
		publishN(t, p, 1)
		js := client(t, s.ClientURL())
		require.NoError(t, js.DeleteConsumer(context.Background(), stream.Name, "billing"))
		eventually(t, func() bool {
			_, err := js.Consumer(context.Background(), stream.Name, "billing")
			return err == nil
		}, "recreated")
	})

	t.Run("converts the limits stream of an earlier version in place, keeping what billing has not acked", func(t *testing.T) {
		t.Parallel()
		s := natsServer(t, "", "")
		js := client(t, s.ClientURL())
		old := legacyStream(t, js)
		// Billing's durable on the old stream, behind: the old message unacked.
		_, err := js.CreateConsumer(context.Background(), stream.Name, stream.ConsumerConfig{Durable: "billing"}.JetStreamConfig())
		require.NoError(t, err)

		p := publisher(t, s.ClientURL())
		m := message("RuleActivated")
		publishUntil(t, p, m)
		info := streamInfo(t, js)
		require.Equal(t, jetstream.InterestPolicy, info.Config.Retention, "NATS 2.10 and later change the retention in place")
		require.Zero(t, info.Config.MaxAge)
		require.EqualValues(t, 2, info.State.Msgs, "the unacked old message is kept")
		r := &recorder{}
		consumer(t, s.ClientURL(), "billing", r)
		eventually(t, func() bool { return len(r.deliveries(old)) == 1 }, "the old message is delivered")
		eventually(t, func() bool { return len(r.deliveries(m.ID.String())) == 1 }, "the new message is delivered")
	})

	t.Run("refuses to publish to a limits stream the server cannot convert, until it is deleted", func(t *testing.T) {
		t.Parallel()
		const bin = "/usr/sbin/nats-server" // Debian's 2.9: no retention change in place
		if _, err := os.Stat(bin); err != nil {
			t.Skip("no " + bin)
		}
		addr := freeAddr(t)
		proctest.Start(t, bin, map[string]string{}, "-js", "-a", "127.0.0.1", "-p", portOf(t, addr), "-sd", t.TempDir())
		url := "nats://" + addr
		var js jetstream.JetStream
		eventually(t, func() bool {
			nc, err := nats.Connect(url)
			if err != nil {
				return false
			}
			t.Cleanup(nc.Close)
			js, err = jetstream.New(nc)
			require.NoError(t, err)
			return true
		}, "nats-server 2.9 is up")
		legacyStream(t, js)

		p := publisher(t, url)
		var err error
		eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err = p.Publish(ctx, message("RuleActivated"))
			return errors.Is(err, stream.ErrRetention)
		}, "the publish is refused for the retention")
		require.False(t, outbox.IsPermanent(err), "the row waits in the outbox and is retried")
		require.ErrorContains(t, err, "nats stream rm "+stream.Name, "the error says what to do")
		require.EqualValues(t, 1, streamInfo(t, js).State.Msgs, "nothing published to the lossy stream")

		require.NoError(t, js.DeleteStream(context.Background(), stream.Name))
		publishUntil(t, p, message("RuleActivated"))
		require.Equal(t, jetstream.InterestPolicy, streamInfo(t, js).Config.Retention, "recreated with interest retention")
	})
}

// legacyStream makes the stream as labeling made it before: limits retention
// with an age limit, holding one message; it returns that message's id.
func legacyStream(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	_, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: stream.Name, Subjects: []string{stream.Subjects}, Storage: jetstream.FileStorage,
		Retention: jetstream.LimitsPolicy, MaxAge: time.Hour, Duplicates: time.Minute,
	})
	require.NoError(t, err)
	m := message("RuleActivated")
	body := []byte(`{"id":"` + m.ID.String() + `","type":"RuleActivated","occurredAt":1,"payload":{}}`)
	msg := nats.NewMsg(stream.Subject(m.Tag))
	msg.Data = body
	msg.Header.Set(stream.SignatureHeader, stream.Sign(key, msg.Subject, m.ID.String(), body))
	_, err = js.PublishMsg(context.Background(), msg, jetstream.WithMsgID(m.ID.String()))
	require.NoError(t, err)
	return m.ID.String()
}

func portOf(t *testing.T, addr string) string {
	t.Helper()
	for i := len(addr) - 1; i >= 0; i-- {
		if addr[i] == ':' {
			return addr[i+1:]
		}
	}
	t.Fatalf("no port in %s", addr)
	return ""
}

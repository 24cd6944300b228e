package stream_test

import (
	"context"
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

// TestDeletedDurable deletes billing's durable under a ready publisher and
// publishes: the stream acks messages it keeps for nobody, and none of them may
// count as published until it reaches the durable made again.
func TestDeletedDurable(t *testing.T) {
	t.Parallel()
	t.Run("every message published while the durable was missing reaches it once made again (the server go.mod pins)", func(t *testing.T) {
		t.Parallel()
		deletedDurable(t, natsServer(t, "", "").ClientURL())
	})
	t.Run("every message published while the durable was missing reaches it once made again (nats-server 2.9 process)", func(t *testing.T) {
		t.Parallel()
		srv := startServer29(t, freeAddr(t), t.TempDir())
		deletedDurable(t, srv.url)
	})
}

// server29 is Debian's nats-server 2.9, as the e2e suite runs it, as a process
// that a test can kill -9 and start again on the same port and store.
type server29 struct {
	url, addr, dir string
	life           *proctest.Process
}

const bin29 = "/usr/sbin/nats-server"

func startServer29(t *testing.T, addr, dir string) *server29 {
	t.Helper()
	if _, err := os.Stat(bin29); err != nil {
		t.Skip("no " + bin29)
	}
	s := &server29{url: "nats://" + addr, addr: addr, dir: dir}
	s.start(t)
	return s
}

func (s *server29) start(t *testing.T) {
	t.Helper()
	s.life = proctest.Start(t, bin29, map[string]string{}, "-js", "-a", "127.0.0.1", "-p", portOf(t, s.addr), "-sd", s.dir)
	eventually(t, func() bool {
		nc, err := nats.Connect(s.url)
		if err == nil {
			nc.Close()
		}
		return err == nil
	}, "nats-server 2.9 is up")
}

// appended is a message whose row was appended now, after every durable the
// test made: more than ClockSkew after, as in a running system, though the
// test's durables are seconds old.
func appended(tag string) outbox.Message {
	m := message(tag)
	m.CreatedAt = time.Now().Add(stream.ClockSkew + time.Second).UnixMilli()
	return m
}

// consumedAll waits until billing's recorder has every message and the
// interest stream, every durable having acked them, holds none.
func consumedAll(t *testing.T, js jetstream.JetStream, r *recorder, ms ...outbox.Message) {
	t.Helper()
	eventually(t, func() bool {
		for _, m := range ms {
			if len(r.deliveries(m.ID.String())) == 0 {
				return false
			}
		}
		st, err := js.Stream(context.Background(), stream.Name)
		return err == nil && st.CachedInfo().State.Msgs == 0
	}, "billing consumed every message and the stream removed them")
}

// TestConsumedMessage: a row whose message every durable consumed, so that
// the interest stream removed it, is settled when its publish is acked again
// (a duplicate of a message the stream no longer holds), whatever the
// publisher remembers of the durable: the durable was made before the row.
// Before, such an ack at or below the boundary was refused as perhaps dropped
// for no interest, and every retry spent an attempt until the row was
// dead-lettered.
func TestConsumedMessage(t *testing.T) {
	t.Parallel()
	t.Run("a restarted labeling settles the republish of a message billing consumed", func(t *testing.T) {
		t.Parallel()
		url := natsServer(t, "", "").ClientURL()
		first := startPublisher(t, publisherConfig(url))
		r := &recorder{}
		consumer(t, url, "billing", r)
		m := appended("RuleActivated")
		publishUntil(t, first, m)
		consumedAll(t, client(t, url), r, m)
		require.NoError(t, first.Stop(context.Background()), "labeling dies before the settle")

		again := startPublisher(t, publisherConfig(url))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, again.Publish(ctx, m), "its durable consumed it: settled at the first try")
		require.Len(t, r.deliveries(m.ID.String()), 1, "the broker dropped the republish")
	})

	t.Run("after nats-server 2.9 is killed and restarted on its store, every acked publish is settled", func(t *testing.T) {
		t.Parallel()
		srv := startServer29(t, freeAddr(t), t.TempDir())
		p := startPublisher(t, publisherConfig(srv.url))
		r := &recorder{}
		consumer(t, srv.url, "billing", r)
		js := client(t, srv.url)
		before := appended("RuleActivated")
		publishUntil(t, p, before)
		consumedAll(t, js, r, before)
		c, err := js.Consumer(context.Background(), stream.Name, "billing")
		require.NoError(t, err)
		created := c.CachedInfo().Created

		srv.life.Kill(t)
		srv.start(t)
		c, err = js.Consumer(context.Background(), stream.Name, "billing")
		require.NoError(t, err)
		t.Logf("billing's durable created %s before the kill, %s after the restart", created.Format(time.RFC3339Nano),
			c.CachedInfo().Created.Format(time.RFC3339Nano))

		// Only the reconnect may refuse: an acked publish is settled.
		after := appended("RuleActivated")
		deadline := time.Now().Add(15 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			err := p.Publish(ctx, after)
			cancel()
			if err == nil {
				break
			}
			require.NotContains(t, err.Error(), "acked at sequence", "an acked publish refused: %v", err)
			require.True(t, time.Now().Before(deadline), "never published: %v", err)
			time.Sleep(50 * time.Millisecond)
		}
		consumedAll(t, js, r, after)
		for _, m := range []outbox.Message{before, after} {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			require.NoError(t, p.Publish(ctx, m), "consumed by its durable, made before the row: settled")
			cancel()
		}
	})
}

func deletedDurable(t *testing.T, url string) {
	t.Helper()
	cfg := publisherConfig(url)
	cfg.DuplicateWindow = 2 * time.Second // so a dropped message's id can be stored anew soon
	cfg.CheckEvery = time.Hour            // only the publisher's own finding makes the durable again
	p := startPublisher(t, cfg)
	first := message("RuleActivated")
	publishUntil(t, p, first)

	js := client(t, url)
	require.NoError(t, js.DeleteConsumer(context.Background(), stream.Name, "billing"))
	const n = 20
	ms := make([]outbox.Message, n)
	refused := 0
	for i := range ms {
		ms[i] = message("RuleActivated")
		ms[i].CreatedAt = time.Now().UnixMilli() // appended while the durable was missing
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := p.Publish(ctx, ms[i]); err != nil {
			_, wait := outbox.WaitOf(err)
			require.True(t, wait, "a refusal is a wait, which spends no attempt: %v", err)
			refused++
		}
		cancel()
	}
	require.Positive(t, refused, "a publish acked while the durable was missing is not a success")
	for _, m := range ms {
		tries := relayUntil(t, p, m, cfg.DuplicateWindow+5*time.Second)
		require.LessOrEqual(t, tries, 6, "waits come no sooner than needed")
	}

	r := &recorder{}
	consumer(t, url, "billing", r)
	for _, m := range ms {
		eventually(t, func() bool { return len(r.deliveries(m.ID.String())) >= 1 }, "the durable made again got "+m.ID.String())
	}
}

// relayUntil publishes m as the relay would, within bound: an error marked
// outbox.Wait delays the next try by its wait, spending no attempt; any other
// error fails the test (the scenario has no outage). It returns the tries.
func relayUntil(t *testing.T, p *stream.Publisher, m outbox.Message, bound time.Duration) int {
	t.Helper()
	deadline := time.Now().Add(bound)
	for tries := 1; ; tries++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := p.Publish(ctx, m)
		cancel()
		if err == nil {
			return tries
		}
		d, wait := outbox.WaitOf(err)
		require.True(t, wait, "try %d of %s: a refusal is a wait: %v", tries, m.ID, err)
		require.True(t, time.Now().Add(d).Before(deadline), "try %d of %s: waits %s, past %s: %v", tries, m.ID, d, bound, err)
		time.Sleep(d) // the row's available_at
	}
}

package stream_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/stream"
)

var logger = slog.New(slog.NewTextHandler(io.Discard, nil))

// natsServer runs a real JetStream server in the test process, on addr (a free
// port when empty), storing in dir (a fresh one when empty).
func natsServer(t *testing.T, addr, dir string) *server.Server {
	t.Helper()
	if addr == "" {
		addr = freeAddr(t)
	}
	if dir == "" {
		dir = t.TempDir()
	}
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	var p int
	_, err = fmt.Sscan(port, &p)
	require.NoError(t, err)
	s, err := server.NewServer(&server.Options{Host: host, Port: p, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats server ready")
	t.Cleanup(s.Shutdown)
	return s
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

func client(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// key is the test's EVENTS_TOKEN.
var key = []byte("test-events-token")

// publisherConfig is labeling's publisher of url, keeping every message for the
// durables given ("billing" when none).
func publisherConfig(url string, durables ...string) stream.PublisherConfig {
	if len(durables) == 0 {
		durables = []string{"billing"}
	}
	return stream.PublisherConfig{URL: url, Replicas: 1, DuplicateWindow: time.Minute, Key: key, Consumers: durables}
}

func publisher(t *testing.T, url string, durables ...string) *stream.Publisher {
	t.Helper()
	return startPublisher(t, publisherConfig(url, durables...))
}

func startPublisher(t *testing.T, cfg stream.PublisherConfig) *stream.Publisher {
	t.Helper()
	p, err := stream.NewPublisher(cfg, logger)
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(func() { _ = p.Stop(context.Background()) })
	return p
}

func message(tag string) outbox.Message {
	return outbox.Message{ID: uuid.Must(uuid.NewV7()), Tag: tag, Payload: json.RawMessage(`{"orgId":"x"}`), CreatedAt: 1700000000000, Attempt: 1}
}

// publishUntil publishes until the publisher's background loop has made the stream.
func publishUntil(t *testing.T, p *stream.Publisher, m outbox.Message) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := p.Publish(ctx, m)
		cancel()
		if err == nil {
			return
		}
		require.False(t, outbox.IsPermanent(err), "%v", err)
		require.True(t, time.Now().Before(deadline), "publish never succeeded: %v", err)
		time.Sleep(50 * time.Millisecond)
	}
}

func counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, labels) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func matches(m *dto.Metric, labels map[string]string) bool {
	for k, v := range labels {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == k && l.GetValue() == v {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func TestPublisher(t *testing.T) {
	t.Parallel()
	t.Run("creates the stream and stores each row once, the republish acked as a duplicate", func(t *testing.T) {
		t.Parallel()
		s := natsServer(t, "", "")
		p := publisher(t, s.ClientURL())
		m := message("RuleActivated")
		publishUntil(t, p, m)

		js := client(t, s.ClientURL())
		st, err := js.Stream(context.Background(), stream.Name)
		require.NoError(t, err)
		info, err := st.Info(context.Background())
		require.NoError(t, err)
		require.Equal(t, jetstream.FileStorage, info.Config.Storage)
		require.Equal(t, []string{"labeling.events.>"}, info.Config.Subjects)
		require.Equal(t, time.Minute, info.Config.Duplicates)
		require.Equal(t, 1, info.Config.Replicas)
		require.EqualValues(t, 1, info.State.Msgs)

		dups := counter(t, "nats_publishes_total", map[string]string{"outcome": stream.PublishDuplicate})
		require.NoError(t, p.Publish(context.Background(), m), "a republish of the same row is a success")
		require.Equal(t, dups+1, counter(t, "nats_publishes_total", map[string]string{"outcome": stream.PublishDuplicate}))
		info, err = st.Info(context.Background())
		require.NoError(t, err)
		require.EqualValues(t, 1, info.State.Msgs, "the broker dropped the republish")

		raw, err := st.GetMsg(context.Background(), 1)
		require.NoError(t, err)
		require.Equal(t, "labeling.events.RuleActivated", raw.Subject)
		require.Equal(t, m.ID.String(), raw.Header.Get(nats.MsgIdHdr))
		require.NoError(t, stream.Verify(key, raw.Subject, m.ID.String(), raw.Data, raw.Header.Get(stream.SignatureHeader)),
			"signed with the key over subject, id and body")
		require.Regexp(t, `^v1=[0-9a-f]{64}$`, raw.Header.Get(stream.SignatureHeader))
		require.JSONEq(t, `{"id":"`+m.ID.String()+`","type":"RuleActivated","occurredAt":1700000000000,"payload":{"orgId":"x"}}`, string(raw.Data))
	})

	t.Run("a publish right after start waits for the first check of the stream instead of failing", func(t *testing.T) {
		t.Parallel()
		s := natsServer(t, "", "")
		p := publisher(t, s.ClientURL())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(t, p.Publish(ctx, message("RuleActivated")), "the first attempt succeeds: no attempt is spent on \"not checked yet\"")
	})

	t.Run("starts without a server, fails publishes, and makes the stream once the server is up", func(t *testing.T) {
		t.Parallel()
		addr := freeAddr(t)
		p := publisher(t, "nats://"+addr)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		err := p.Publish(ctx, message("RuleActivated"))
		cancel()
		require.Error(t, err, "no server: no ack")
		require.False(t, outbox.IsPermanent(err), "an ordinary failure, retried")

		natsServer(t, addr, "")
		publishUntil(t, p, message("RuleDeactivated"))
	})

	t.Run("a publish while the connection is down waits, as long as it has been down, without an attempt", func(t *testing.T) {
		t.Parallel()
		addr, dir := freeAddr(t), t.TempDir()
		s := natsServer(t, addr, dir)
		p := publisher(t, s.ClientURL())
		publishUntil(t, p, message("RuleActivated"))
		s.Shutdown()
		waitOf := func() time.Duration {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err := p.Publish(ctx, message("RuleActivated"))
			require.Error(t, err, "no ack without a server")
			d, _ := outbox.WaitOf(err)
			return d
		}
		// Until the client has seen the connection go, a publish may fail as
		// an attempt (the server hung up under it).
		eventually(t, func() bool { return waitOf() >= time.Second }, "a publish while disconnected waits a second at least")
		start := time.Now()
		eventually(t, func() bool { return time.Since(start) > 2*time.Second }, "the outage goes on")
		require.GreaterOrEqual(t, waitOf(), 2*time.Second, "the wait grows with the outage")

		natsServer(t, addr, dir)
		publishUntil(t, p, message("RuleDeactivated"))
	})

	t.Run("updates the stream's duplicate window on a restart with another one", func(t *testing.T) {
		t.Parallel()
		s := natsServer(t, "", "")
		publishUntil(t, publisher(t, s.ClientURL()), message("RuleActivated"))
		cfg := publisherConfig(s.ClientURL())
		cfg.DuplicateWindow = 2 * time.Minute
		startPublisher(t, cfg)
		js := client(t, s.ClientURL())
		deadline := time.Now().Add(10 * time.Second)
		for {
			st, err := js.Stream(context.Background(), stream.Name)
			require.NoError(t, err)
			if st.CachedInfo().Config.Duplicates == 2*time.Minute {
				break
			}
			require.True(t, time.Now().Before(deadline), "stream not updated")
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("refuses to start without a key or a consumer to keep messages for", func(t *testing.T) {
		t.Parallel()
		cfg := publisherConfig("nats://127.0.0.1:1")
		cfg.Key = nil
		_, err := stream.NewPublisher(cfg, logger)
		require.ErrorContains(t, err, "EVENTS_TOKEN")
		cfg = publisherConfig("nats://127.0.0.1:1")
		cfg.Consumers = nil
		_, err = stream.NewPublisher(cfg, logger)
		require.ErrorContains(t, err, "NATS_CONSUMERS")
	})
}

// recorder is a handler that records each delivery and answers by a script.
type recorder struct {
	mu     sync.Mutex
	seen   []stream.Message
	at     map[string][]time.Time // when each msg id was delivered
	answer func(m stream.Message) error
}

func (r *recorder) handle(_ context.Context, m stream.Message) error {
	r.mu.Lock()
	r.seen = append(r.seen, m)
	if r.at == nil {
		r.at = map[string][]time.Time{}
	}
	r.at[m.MsgID] = append(r.at[m.MsgID], time.Now())
	answer := r.answer
	r.mu.Unlock()
	if answer == nil {
		return nil
	}
	return answer(m)
}

func (r *recorder) deliveries(id string) []stream.Message {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []stream.Message
	for _, m := range r.seen {
		if m.MsgID == id {
			out = append(out, m)
		}
	}
	return out
}

func consumer(t *testing.T, url, durable string, r *recorder) {
	t.Helper()
	c, err := stream.NewConsumer(stream.ConsumerConfig{URL: url, Durable: durable, AckWait: 2 * time.Second, NakBase: 100 * time.Millisecond, NakMax: time.Second}, r.handle, logger)
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
}

func eventually(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		require.True(t, time.Now().Before(deadline), msg)
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConsumer(t *testing.T) {
	t.Parallel()
	t.Run("waits for the stream, then acks each handled message once", func(t *testing.T) {
		t.Parallel()
		s := natsServer(t, "", "")
		r := &recorder{}
		consumer(t, s.ClientURL(), "billing", r)
		eventually(t, func() bool {
			info, err := s.Jsz(nil)
			require.NoError(t, err)
			return info.API.Errors > 0 && info.Streams == 0
		}, "the consumer tried to create itself before the stream exists, and failed")
		p := publisher(t, s.ClientURL())
		m := message("RuleActivated")
		publishUntil(t, p, m)
		eventually(t, func() bool { return len(r.deliveries(m.ID.String())) == 1 }, "delivered")
		require.Equal(t, "labeling.events.RuleActivated", r.deliveries(m.ID.String())[0].Subject)

		info, err := client(t, s.ClientURL()).Consumer(context.Background(), stream.Name, "billing")
		require.NoError(t, err)
		eventually(t, func() bool {
			ci, err := info.Info(context.Background())
			require.NoError(t, err)
			return ci.NumAckPending == 0 && ci.AckFloor.Stream == 1
		}, "acked")
		time.Sleep(2500 * time.Millisecond) // past the ack wait
		require.Len(t, r.deliveries(m.ID.String()), 1, "an acked message is not redelivered")
	})

	t.Run("a failure is redelivered after a delay, a terminated message never again", func(t *testing.T) {
		t.Parallel()
		s := natsServer(t, "", "")
		p := publisher(t, s.ClientURL())
		transient, terminal := message("RuleActivated"), message("RuleActivated")
		r := &recorder{answer: func(m stream.Message) error {
			switch {
			case m.MsgID == terminal.ID.String():
				return stream.Terminate(errors.New("schema"))
			case m.MsgID == transient.ID.String() && m.Delivered < 3:
				return errors.New("database down")
			}
			return nil
		}}
		consumer(t, s.ClientURL(), "billing", r)
		publishUntil(t, p, transient)
		publishUntil(t, p, terminal)
		eventually(t, func() bool { return len(r.deliveries(transient.ID.String())) == 3 }, "redelivered until it succeeds")
		got := r.deliveries(transient.ID.String())
		for i, m := range got {
			require.EqualValues(t, i+1, m.Delivered)
		}
		r.mu.Lock()
		at := r.at[transient.ID.String()]
		r.mu.Unlock()
		// Lower bounds only: a busy machine can only make the gaps longer.
		require.GreaterOrEqual(t, at[1].Sub(at[0]), 100*time.Millisecond, "naked with NakBase")
		require.GreaterOrEqual(t, at[2].Sub(at[1]), 200*time.Millisecond, "the delay doubles")
		time.Sleep(2500 * time.Millisecond) // past the ack wait
		require.Len(t, r.deliveries(terminal.ID.String()), 1, "terminated: never redelivered")
		require.Len(t, r.deliveries(transient.ID.String()), 3, "acked after the third delivery")
	})

	t.Run("handles several messages at once, each acked after its own handler", func(t *testing.T) {
		t.Parallel()
		s := natsServer(t, "", "")
		p := publisher(t, s.ClientURL())
		const n = 4 // fewer than the default Workers
		var inFlight atomic.Int32
		all := make(chan struct{})
		var once sync.Once
		r := &recorder{answer: func(stream.Message) error {
			if inFlight.Add(1) == n {
				once.Do(func() { close(all) })
			}
			select { // one at a time, the first handler would wait here in vain
			case <-all:
				return nil
			case <-time.After(10 * time.Second):
				return errors.New("the other messages were not handled beside this one")
			}
		}}
		consumer(t, s.ClientURL(), "billing", r)
		var ids []string
		for range n {
			m := message("RuleActivated")
			ids = append(ids, m.ID.String())
			publishUntil(t, p, m)
		}
		for _, id := range ids {
			eventually(t, func() bool { return len(r.deliveries(id)) >= 1 }, "delivered: "+id)
		}
		select {
		case <-all:
		case <-time.After(15 * time.Second):
			t.Fatalf("only %d of %d messages were in hand at once", inFlight.Load(), n)
		}
		info, err := client(t, s.ClientURL()).Consumer(context.Background(), stream.Name, "billing")
		require.NoError(t, err)
		eventually(t, func() bool {
			ci, err := info.Info(context.Background())
			require.NoError(t, err)
			return ci.NumAckPending == 0 && ci.AckFloor.Stream == n
		}, "all acked")
		for _, id := range ids {
			require.Len(t, r.deliveries(id), 1, "handled once: "+id)
		}
	})

	t.Run("a second durable consumer sees every message too", func(t *testing.T) {
		t.Parallel()
		s := natsServer(t, "", "")
		a, b := &recorder{}, &recorder{}
		p := publisher(t, s.ClientURL(), "billing", "audit")
		consumer(t, s.ClientURL(), "billing", a)
		consumer(t, s.ClientURL(), "audit", b)
		var ids []string
		for range 5 {
			m := message("RuleActivated")
			ids = append(ids, m.ID.String())
			publishUntil(t, p, m)
		}
		for _, id := range ids {
			eventually(t, func() bool { return len(a.deliveries(id)) == 1 && len(b.deliveries(id)) == 1 }, "both consumers see "+id)
		}
	})
}

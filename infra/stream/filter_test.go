package stream_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// servers are the two NATS versions the filters differ on: the one go.mod
// pins (2.10 or later: FilterSubjects) run in the test process, and Debian's
// 2.9 (FilterSubject only) as a process, as the e2e suite runs it.
var servers = []struct {
	name  string
	multi bool // FilterSubjects
	url   func(t *testing.T) string
}{
	{"the server go.mod pins", true, func(t *testing.T) string { return natsServer(t, "", "").ClientURL() }},
	{"nats-server 2.9 process", false, func(t *testing.T) string { return startServer29(t, freeAddr(t), t.TempDir()).url }},
}

// typedConsumer is the durable consumer of types, recording into r.
func typedConsumer(t *testing.T, url, durable string, types []string, r *recorder, log *slog.Logger) *stream.Consumer {
	t.Helper()
	c, err := stream.NewConsumer(stream.ConsumerConfig{URL: url, Durable: durable, Types: types, AckWait: 2 * time.Second,
		NakBase: 100 * time.Millisecond, NakMax: time.Second}, r.handle, log)
	require.NoError(t, err)
	require.NoError(t, c.Start(context.Background()))
	t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
	eventually(t, func() bool { return c.Filter() != nil }, durable+" created or updated")
	return c
}

func durableFilter(t *testing.T, js jetstream.JetStream, durable string) []string {
	t.Helper()
	c, err := js.Consumer(context.Background(), stream.Name, durable)
	require.NoError(t, err)
	return stream.Applied(c.CachedInfo().Config)
}

func subjects(r *recorder) map[string]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]int{}
	for _, m := range r.seen {
		out[m.Subject]++
	}
	return out
}

func TestFilteredDurables(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run("each durable receives only its types, its filter read back ("+srv.name+")", func(t *testing.T) {
			t.Parallel()
			url := srv.url(t)
			cfg := publisherConfig(url, "billing", "ledger")
			cfg.ConsumerTypes = map[string][]string{"ledger": {"RuleActivated"}}
			p := startPublisher(t, cfg)
			js := client(t, url)
			billing, ledger := &recorder{}, &recorder{}
			bc := typedConsumer(t, url, "billing", []string{"RuleActivated", "RuleDeactivated"}, billing, logger)
			lc := typedConsumer(t, url, "ledger", []string{"RuleActivated"}, ledger, logger)

			require.Equal(t, []string{"labeling.events.RuleActivated"}, lc.Filter(), "one type: FilterSubject on every version")
			if srv.multi {
				require.Equal(t, []string{"labeling.events.RuleActivated", "labeling.events.RuleDeactivated"}, bc.Filter())
			} else {
				require.Equal(t, []string{"labeling.events.>"}, bc.Filter(), "several types on 2.9: not narrowed")
			}
			require.Equal(t, bc.Filter(), durableFilter(t, js, "billing"), "read back as the server has it")
			require.Equal(t, lc.Filter(), durableFilter(t, js, "ledger"))

			var ms []outbox.Message
			for range 3 {
				ms = append(ms, appended("RuleActivated"), appended("RuleDeactivated"))
			}
			for _, m := range ms {
				publishUntil(t, p, m)
			}
			consumedAll(t, js, billing, ms...)
			eventually(t, func() bool { return subjects(ledger)["labeling.events.RuleActivated"] == 3 }, "the ledger got every RuleActivated")
			require.Equal(t, map[string]int{"labeling.events.RuleActivated": 3}, subjects(ledger), "and nothing else")
			require.Equal(t, map[string]int{"labeling.events.RuleActivated": 3, "labeling.events.RuleDeactivated": 3}, subjects(billing))
		})

		t.Run("a durable made by labeling with its types takes only them ("+srv.name+")", func(t *testing.T) {
			t.Parallel()
			url := srv.url(t)
			cfg := publisherConfig(url, "billing", "ledger")
			cfg.ConsumerTypes = map[string][]string{"ledger": {"RuleActivated"}, "billing": {"RuleActivated", "RuleDeactivated"}}
			publishUntil(t, startPublisher(t, cfg), appended("RuleActivated"))
			js := client(t, url)
			require.Equal(t, []string{"labeling.events.RuleActivated"}, durableFilter(t, js, "ledger"))
			if srv.multi {
				require.Equal(t, []string{"labeling.events.RuleActivated", "labeling.events.RuleDeactivated"}, durableFilter(t, js, "billing"))
			} else {
				require.Equal(t, []string{"labeling.events.>"}, durableFilter(t, js, "billing"),
					"2.9 would make it without a filter, and an error, if sent FilterSubjects")
			}
		})

		t.Run("a type no durable takes is settled on its publish ack, also republished by a restarted labeling ("+srv.name+")", func(t *testing.T) {
			t.Parallel()
			url := srv.url(t)
			cfg := publisherConfig(url, "ledger")
			cfg.ConsumerTypes = map[string][]string{"ledger": {"RuleActivated"}}
			var logs proctest.Buffer
			p, err := stream.NewPublisher(cfg, slog.New(slog.NewTextHandler(&logs, nil)))
			require.NoError(t, err)
			require.NoError(t, p.Start(context.Background()))
			t.Cleanup(func() { _ = p.Stop(context.Background()) })
			ledger := &recorder{}
			typedConsumer(t, url, "ledger", []string{"RuleActivated"}, ledger, logger)

			// Appended now, seconds after the ledger's durable was made: only
			// its filter can tell that the stream keeps it for no one.
			m := message("RuleDeactivated")
			m.CreatedAt = time.Now().UnixMilli()
			publishUntil(t, p, m)
			other := message("RuleDeactivated")
			other.CreatedAt = time.Now().UnixMilli()
			publishUntil(t, p, other)
			require.Equal(t, 1, strings.Count(logs.String(), "no durable takes labeling.events.RuleDeactivated"), "logged once: %s", logs.String())
			require.NoError(t, p.Stop(context.Background()), "labeling dies before the settle")

			again := startPublisher(t, cfg)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, again.Publish(ctx, m), "a duplicate ack of a message kept for no one: settled at the first try")

			a := appended("RuleActivated")
			publishUntil(t, again, a)
			eventually(t, func() bool { return len(ledger.deliveries(a.ID.String())) == 1 }, "the ledger got its type")
			require.Equal(t, map[string]int{"labeling.events.RuleActivated": 1}, subjects(ledger), "and never the other")
		})
	}

	t.Run("a consumer of several types acks unhandled a type it does not handle that its durable takes (nats-server 2.9 process)", func(t *testing.T) {
		t.Parallel()
		url := servers[1].url(t)
		p := startPublisher(t, publisherConfig(url, "audit"))
		audit := &recorder{}
		c := typedConsumer(t, url, "audit", []string{"RuleActivated", "RuleDeactivated"}, audit, logger)
		require.Equal(t, []string{"labeling.events.>"}, c.Filter())
		skipped := counter(t, "nats_consumed_total", map[string]string{"consumer": "audit", "outcome": stream.ConsumeSkipped})
		other, mine := appended("RuleArchived"), appended("RuleActivated")
		publishUntil(t, p, other)
		publishUntil(t, p, mine)
		consumedAll(t, client(t, url), audit, mine)
		require.Empty(t, audit.deliveries(other.ID.String()), "never handed to the handler")
		require.Equal(t, skipped+1, counter(t, "nats_consumed_total", map[string]string{"consumer": "audit", "outcome": stream.ConsumeSkipped}))
	})
}

// TestFilterUpdate: a durable whose service now handles more types. On 2.10
// and later its filter is updated, and it gets the new type's messages from
// then on; on 2.9 it keeps its filter (and says so), because 2.9 mishandles a
// filter update, which the second subtest shows on the server itself.
func TestFilterUpdate(t *testing.T) {
	t.Parallel()
	for _, srv := range servers {
		t.Run("an existing durable's filter is updated on 2.10+, kept on 2.9 and logged ("+srv.name+")", func(t *testing.T) {
			t.Parallel()
			url := srv.url(t)
			cfg := publisherConfig(url, "ledger")
			cfg.ConsumerTypes = map[string][]string{"ledger": {"RuleActivated"}}
			p := startPublisher(t, cfg)
			publishUntil(t, p, appended("RuleActivated"))

			var logs proctest.Buffer
			ledger := &recorder{}
			c := typedConsumer(t, url, "ledger", []string{"RuleActivated", "RuleDeactivated"}, ledger, slog.New(slog.NewTextHandler(&logs, nil)))
			js := client(t, url)
			later := appended("RuleDeactivated")
			publishUntil(t, p, later)
			if srv.multi {
				require.Equal(t, []string{"labeling.events.RuleActivated", "labeling.events.RuleDeactivated"}, c.Filter())
				eventually(t, func() bool { return len(ledger.deliveries(later.ID.String())) == 1 }, "the new type reaches it")
			} else {
				require.Equal(t, []string{"labeling.events.RuleActivated"}, c.Filter(), "kept")
				require.Contains(t, logs.String(), "keeps its filter labeling.events.RuleActivated")
				eventually(t, func() bool {
					st, err := js.Stream(context.Background(), stream.Name)
					return err == nil && st.CachedInfo().State.Msgs == 0
				}, "the new type is kept for no one")
				require.Empty(t, ledger.deliveries(later.ID.String()))
			}
			require.Equal(t, c.Filter(), durableFilter(t, js, "ledger"))
		})

		t.Run("the messages a durable gets after its filter is widened ("+srv.name+")", func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			js := client(t, srv.url(t))
			_, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "S", Subjects: []string{"e.>"}, Retention: jetstream.InterestPolicy})
			require.NoError(t, err)
			_, err = js.CreateConsumer(ctx, "S", jetstream.ConsumerConfig{Durable: "all", AckPolicy: jetstream.AckExplicitPolicy})
			require.NoError(t, err, "a durable that keeps every message in the stream")
			narrow := jetstream.ConsumerConfig{Durable: "x", AckPolicy: jetstream.AckExplicitPolicy, FilterSubject: "e.A"}
			c, err := js.CreateConsumer(ctx, "S", narrow)
			require.NoError(t, err)
			for _, subj := range []string{"e.A", "e.B", "e.A", "e.B"} {
				_, err = js.Publish(ctx, subj, nil)
				require.NoError(t, err)
			}
			require.Equal(t, 2, drain(t, c), "its A's")
			_, err = js.Publish(ctx, "e.B", nil)
			require.NoError(t, err, "stored while x does not take it")

			narrow.FilterSubject = "e.>"
			c, err = js.UpdateConsumer(ctx, "S", narrow)
			require.NoError(t, err)
			_, err = js.Publish(ctx, "e.B", nil)
			require.NoError(t, err, "stored after the update")
			got := drain(t, c)
			if srv.multi {
				require.Equal(t, 2, got, "the B stored after its last delivery, and the one after the update")
			} else {
				require.Zero(t, got, "2.9.10 skips every message stored, even the one after the update")
			}
		})
	}
}

// drain fetches from c until the server says nothing is pending for it, and
// returns how many messages it got, each acked.
func drain(t *testing.T, c jetstream.Consumer) int {
	t.Helper()
	n := 0
	deadline := time.Now().Add(15 * time.Second)
	for {
		b, err := c.Fetch(10, jetstream.FetchMaxWait(200*time.Millisecond))
		require.NoError(t, err)
		for m := range b.Messages() {
			n++
			require.NoError(t, m.Ack())
		}
		info, err := c.Info(context.Background())
		require.NoError(t, err)
		if info.NumPending == 0 && info.NumAckPending == 0 {
			return n
		}
		require.True(t, time.Now().Before(deadline), "still pending: %+v", info)
	}
}

package stream_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
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
		const bin = "/usr/sbin/nats-server" // Debian's 2.9, as the e2e suite runs it
		if _, err := os.Stat(bin); err != nil {
			t.Skip("no " + bin)
		}
		addr := freeAddr(t)
		proctest.Start(t, bin, map[string]string{}, "-js", "-a", "127.0.0.1", "-p", portOf(t, addr), "-sd", t.TempDir())
		url := "nats://" + addr
		eventually(t, func() bool {
			nc, err := nats.Connect(url)
			if err == nil {
				nc.Close()
			}
			return err == nil
		}, "nats-server 2.9 is up")
		deletedDurable(t, url)
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
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		if err := p.Publish(ctx, ms[i]); err != nil {
			refused++
		}
		cancel()
	}
	require.Positive(t, refused, "a publish acked while the durable was missing is not a success")
	for _, m := range ms {
		publishUntil(t, p, m) // the relay's retries
	}

	r := &recorder{}
	consumer(t, url, "billing", r)
	for _, m := range ms {
		eventually(t, func() bool { return len(r.deliveries(m.ID.String())) >= 1 }, "the durable made again got "+m.ID.String())
	}
}

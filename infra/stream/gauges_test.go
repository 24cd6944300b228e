package stream_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/stream"
)

func gauge(t *testing.T, name, consumer string) (float64, bool) {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if matches(m, map[string]string{"consumer": consumer}) {
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

func TestGauges(t *testing.T) {
	t.Parallel()

	t.Run("a message that cannot be applied yet shows as pending, its age growing, and both fall to zero once it is", func(t *testing.T) {
		t.Parallel()
		const durable = "gauged" // its own label: other tests run "billing" beside it
		s := natsServer(t, "", "")
		p := publisher(t, s.ClientURL(), durable)
		publishN(t, p, 3)
		var fail atomic.Bool
		fail.Store(true)
		r := &recorder{answer: func(stream.Message) error {
			if fail.Load() {
				return errors.New("unknown type")
			}
			return nil
		}}
		c, err := stream.NewConsumer(stream.ConsumerConfig{URL: s.ClientURL(), Durable: durable, AckWait: 2 * time.Second,
			NakBase: 50 * time.Millisecond, NakMax: 100 * time.Millisecond, GaugeEvery: 50 * time.Millisecond}, r.handle, logger)
		require.NoError(t, err)
		require.NoError(t, c.Start(context.Background()))
		t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })

		eventually(t, func() bool {
			pending, _ := gauge(t, "nats_consumer_pending_messages", durable)
			age, _ := gauge(t, "nats_consumer_oldest_unacked_age_seconds", durable)
			return pending == 3 && age >= 0.5
		}, "three pending, the oldest aging")
		fail.Store(false)
		eventually(t, func() bool {
			pending, _ := gauge(t, "nats_consumer_pending_messages", durable)
			age, _ := gauge(t, "nats_consumer_oldest_unacked_age_seconds", durable)
			return pending == 0 && age == 0
		}, "nothing pending once applied")
	})
}

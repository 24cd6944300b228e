// Package natstest starts what a test of the NATS transport needs: a
// JetStream server of its own, in process, on a free loopback port with a
// store in the test's temporary directory (never a server running on the
// machine), and the stream labeling makes with billing's durable on it.
package natstest

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/stream"
)

// Start runs a JetStream server until the test ends and returns it (its
// ClientURL is the NATS_URL to give the services).
func Start(t testing.TB) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats-server ready")
	t.Cleanup(s.Shutdown)
	return s
}

// StreamWithDurable connects to s and makes the stream LABELING_EVENTS as
// labeling makes it (interest retention, file storage) with durable on it,
// so that a billing started against s consumes from its first message; it
// returns the connection's JetStream context, closed when the test ends.
func StreamWithDurable(t testing.TB, s *server.Server, durable string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx := context.Background()
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: stream.Name, Subjects: []string{stream.Subjects},
		Retention: jetstream.InterestPolicy, Storage: jetstream.FileStorage})
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx, stream.Name, stream.ConsumerConfig{Durable: durable}.JetStreamConfig())
	require.NoError(t, err)
	return js
}

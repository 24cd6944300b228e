package stream_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/stream"
)

// syncBuffer is a log sink the client's callbacks write to from their own
// goroutine.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A token given as NATS_URL's user is a credential: the client library's own
// redaction hides only a password, so the "nats connected" line must quote the
// server as scheme://host only.
func TestConnectedLineQuotesNoCredential(t *testing.T) {
	t.Parallel()
	const token = "s3cret-nats-token"
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), Authorization: token, NoSigs: true, NoLog: true})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats server ready")
	t.Cleanup(s.Shutdown)

	var logs syncBuffer
	cfg := publisherConfig(strings.Replace(s.ClientURL(), "nats://", "nats://"+token+"@", 1))
	p, err := stream.NewPublisher(cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(func() { _ = p.Stop(context.Background()) })

	eventually(t, func() bool { return strings.Contains(logs.String(), `"msg":"nats connected"`) }, "the connected line was logged")
	require.NotContains(t, logs.String(), token)
	require.Contains(t, logs.String(), `"server":"nats://`+strings.TrimPrefix(s.ClientURL(), "nats://")+`"`)
}

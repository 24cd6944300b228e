package stream_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

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

	var logs proctest.Buffer
	cfg := publisherConfig(strings.Replace(s.ClientURL(), "nats://", "nats://"+token+"@", 1))
	p, err := stream.NewPublisher(cfg, slog.New(slog.NewJSONHandler(&logs, nil)))
	require.NoError(t, err)
	require.NoError(t, p.Start(context.Background()))
	t.Cleanup(func() { _ = p.Stop(context.Background()) })

	eventually(t, func() bool { return strings.Contains(logs.String(), `"msg":"nats connected"`) }, "the connected line was logged")
	require.NotContains(t, logs.String(), token)
	require.Contains(t, logs.String(), `"server":"nats://`+strings.TrimPrefix(s.ClientURL(), "nats://")+`"`)
}

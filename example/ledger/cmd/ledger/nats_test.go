package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/natstest"
)

// jetStream is an in-process JetStream server with labeling's publisher on
// it, which keeps each message for the durable "ledger".
type jetStream struct {
	url string
	pub *stream.Publisher
}

func startJetStream(t *testing.T) jetStream {
	t.Helper()
	s := natstest.Start(t)
	pub, err := stream.NewPublisher(stream.PublisherConfig{URL: s.ClientURL(), DuplicateWindow: time.Minute,
		Key: []byte(token), Consumers: []string{ledger.Durable}}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	require.NoError(t, pub.Start(context.Background()))
	t.Cleanup(func() { _ = pub.Stop(context.Background()) })
	return jetStream{url: s.ClientURL(), pub: pub}
}

// publish publishes a RuleActivated event as labeling does.
func (js jetStream) publish(t *testing.T, id uuid.UUID) {
	t.Helper()
	m := outbox.Message{ID: id, Tag: ledger.EventType, CreatedAt: time.Now().UnixMilli(), Attempt: 1,
		Payload: json.RawMessage(fmt.Sprintf(`{"orgId":%q,"ruleId":%q}`, uuid.New(), uuid.New()))}
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return js.pub.Publish(ctx, m) == nil
	}, 15*time.Second, 20*time.Millisecond, "published")
}

func TestLedgerOverNATS(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("with NATS_URL the binary consumes its own durable: each event published is applied once", func(t *testing.T) {
			t.Parallel()
			js := startJetStream(t)
			db := dbtest.New(t, d, ledger.Migrations)
			n := startLedger(t, db.URL, map[string]string{"NATS_URL": js.url, "NATS_ACK_WAIT": "2s"})
			for range 3 {
				js.publish(t, uuid.Must(uuid.NewV7()))
			}
			require.Eventually(t, func() bool { return n.count(t) == 3 }, 20*time.Second, 20*time.Millisecond)
		})
	})
}

package billing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
)

// pair is billing consuming a real JetStream server that labeling's publisher
// feeds, with a raw client beside them for a stranger's messages.
type pair struct {
	*bundle
	pub *stream.Publisher
	nc  *nats.Conn
	js  jetstream.JetStream
}

func setupPair(t *testing.T) *pair { return setupPairWith(t, nil) }

// setupPairWith is setupPair with the publisher's configuration edited by edit.
func setupPairWith(t *testing.T, edit func(*stream.PublisherConfig)) *pair {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(s.Shutdown)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))

	b := setup(t, freshDB(t, sqldb.Postgres))
	cfg := stream.PublisherConfig{URL: s.ClientURL(), DuplicateWindow: time.Minute,
		Key: []byte(token), Consumers: []string{billing.Durable}}
	if edit != nil {
		edit(&cfg)
	}
	pub, err := stream.NewPublisher(cfg, logger)
	require.NoError(t, err)
	require.NoError(t, pub.Start(context.Background()))
	t.Cleanup(func() { _ = pub.Stop(context.Background()) })
	cons, err := stream.NewConsumer(stream.ConsumerConfig{URL: s.ClientURL(), Durable: billing.Durable,
		NakBase: 50 * time.Millisecond, NakMax: 200 * time.Millisecond}, b.handler(t, 0), logger)
	require.NoError(t, err)
	require.NoError(t, cons.Start(context.Background()))
	t.Cleanup(func() { _ = cons.Stop(context.Background()) })

	nc, err := nats.Connect(s.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return &pair{bundle: b, pub: pub, nc: nc, js: js}
}

// publish is labeling's relay publishing a row of payload, until the stream is there.
func (p *pair) publish(t *testing.T, payload string) outbox.Message {
	t.Helper()
	m := outbox.Message{ID: uuid.Must(uuid.NewV7()), Tag: billing.RuleActivated, Payload: json.RawMessage(payload),
		CreatedAt: 1767225600000, Attempt: 1}
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return p.pub.Publish(ctx, m) == nil
	}, 15*time.Second, 20*time.Millisecond, "published")
	return m
}

func activation(org uuid.UUID) string {
	return fmt.Sprintf(`{"orgId":%q,"ruleId":%q}`, org, uuid.New())
}

func (p *pair) failed(t *testing.T, n int) []inbox.NATSFailed {
	t.Helper()
	var rows []inbox.NATSFailed
	require.Eventually(t, func() bool {
		var err error
		rows, err = billing.ListNATSFailed(context.Background(), postgres.NewDB(p.pool))
		require.NoError(t, err)
		return len(rows) >= n
	}, 15*time.Second, 20*time.Millisecond, "%d terminated messages recorded", n)
	require.Len(t, rows, n)
	return rows
}

func TestNATSStream(t *testing.T) {
	t.Parallel()

	t.Run("a stranger's unsigned, forged and replayed events are recorded and not applied; labeling's signed one is", func(t *testing.T) {
		t.Parallel()
		p := setupPair(t)
		ctx := context.Background()
		orgStranger := uuid.New()
		send := func(id, sig, body string) {
			msg := nats.NewMsg(stream.Subject(billing.RuleActivated))
			msg.Data = []byte(body)
			if sig != "" {
				msg.Header.Set(stream.SignatureHeader, sig)
			}
			_, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(id))
			require.NoError(t, err)
		}
		envelope := func(id uuid.UUID, org uuid.UUID) string {
			return fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":1767225600000,"payload":%s}`, id, activation(org))
		}
		// The stranger listens on the subjects, to replay what labeling sends.
		sniff, err := p.nc.SubscribeSync(stream.Subjects)
		require.NoError(t, err)
		// The subscription is the server's once a flush returns; labeling
		// publishes on a connection of its own, which could otherwise win.
		require.NoError(t, p.nc.Flush())
		// Before the stranger's, so the stream and billing's durable exist.
		orgLabeling := uuid.New()
		signed := p.publish(t, activation(orgLabeling))
		require.Eventually(t, func() bool {
			n := p.activeRules(t, orgLabeling)
			return n != nil && *n == 1
		}, 15*time.Second, 20*time.Millisecond, "labeling's signed event is applied")

		unsigned := uuid.Must(uuid.NewV7())
		send(unsigned.String(), "", envelope(unsigned, orgStranger))
		forged := uuid.Must(uuid.NewV7())
		body := envelope(forged, orgStranger)
		send(forged.String(), stream.Sign([]byte("guessed-token"), stream.Subject(billing.RuleActivated), forged.String(), []byte(body)), body)
		// Labeling's message as sent, headers and all, under a new id: past the
		// duplicate window and billing's receipt, were the id not signed.
		raw, err := sniff.NextMsg(5 * time.Second)
		require.NoError(t, err)
		require.Equal(t, signed.ID.String(), raw.Header.Get(nats.MsgIdHdr))
		replayID := uuid.NewString()
		send(replayID, raw.Header.Get(stream.SignatureHeader), string(raw.Data))

		rows := p.failed(t, 3)
		byID := map[string]inbox.NATSFailed{}
		for _, r := range rows {
			byID[r.MsgID] = r
			require.Contains(t, r.Reason, "signature")
		}
		require.Contains(t, byID, unsigned.String())
		require.Contains(t, byID, forged.String())
		require.Contains(t, byID, replayID)
		require.Nil(t, p.activeRules(t, orgStranger), "the stranger moved no quota")
		require.EqualValues(t, 1, *p.activeRules(t, orgLabeling), "the replay applied nothing more")
		require.Equal(t, 1, p.count(t, "billing_receipts"))
	})

	t.Run("a poison message is recorded after the stream is recreated, its sequence reused", func(t *testing.T) {
		t.Parallel()
		p := setupPair(t)
		ctx := context.Background()
		first := p.publish(t, `{"orgId":"nope","ruleId":"nope"}`) // signed, invalid: terminated
		rows := p.failed(t, 1)
		require.EqualValues(t, 1, rows[0].StreamSeq)

		require.NoError(t, p.js.DeleteStream(ctx, stream.Name))
		second := p.publish(t, `{"orgId":"still","ruleId":"nope"}`) // the publisher recreates it: sequence 1 again
		rows = p.failed(t, 2)
		require.Equal(t, first.ID.String(), rows[0].MsgID)
		require.Equal(t, second.ID.String(), rows[1].MsgID)
		require.EqualValues(t, 1, rows[1].StreamSeq, "the recreated stream's first message")
		require.NotEqual(t, rows[0].StoredAt, rows[1].StoredAt)
	})
}

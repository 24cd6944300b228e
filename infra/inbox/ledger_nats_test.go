package inbox_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/inboxtest"
	"github.com/acme/outboxpair/internal/testsupport/natstest"
)

// ledgerSubject is where a RuleActivated event is published.
const ledgerSubject = "labeling.events." + ledger.EventType

// signed is a first delivery of body at seq, signed with key as labeling signs.
func signed(key string, seq uint64, id uuid.UUID, body string) stream.Message {
	return stream.Message{Subject: ledgerSubject, MsgID: id.String(), Data: []byte(body), Sequence: seq,
		Stored: time.Unix(1767225600, int64(seq)), Delivered: 1,
		Signature: stream.Sign([]byte(key), ledgerSubject, id.String(), []byte(body))}
}

func TestLedgerNATS(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("signed messages apply once; an unsigned one is recorded in the ledger's own table, never applied", func(t *testing.T) {
			t.Parallel()
			env := setupLedger(t, d, "ledger_nats_"+string(d))
			handle, err := env.Inbox.NATSHandler(inbox.NATSConfig{Key: []byte(inboxtest.Token), MaxDeliveries: 10})
			require.NoError(t, err)
			ctx := context.Background()
			id := uuid.Must(uuid.NewV7())
			m := signed(inboxtest.Token, 1, id, activation(id, "open"))
			require.NoError(t, handle(ctx, m))
			m.Delivered = 2
			require.NoError(t, handle(ctx, m), "a redelivery is acked, applying nothing")
			require.Equal(t, 1, entries(t, env, id))

			forged := uuid.Must(uuid.NewV7())
			err = handle(ctx, signed("not-the-token", 2, forged, activation(forged, "open")))
			require.True(t, stream.IsTerminal(err), "%v", err)
			require.Zero(t, entries(t, env, forged))
			records, err := env.Inbox.ListNATSFailed(ctx)
			require.NoError(t, err)
			require.Len(t, records, 1)
			require.Contains(t, records[0].Reason, "signature")
			require.Equal(t, 1, env.DB.Count(t, `SELECT count(*) FROM ledger_nats_failed`))
		})

		t.Run("a message whose effect keeps failing is recorded at its last delivery; once it can apply, replay applies it once", func(t *testing.T) {
			t.Parallel()
			env := setupLedger(t, d, "ledger_replay_"+string(d))
			handle, err := env.Inbox.NATSHandler(inbox.NATSConfig{Key: []byte(inboxtest.Token), MaxDeliveries: 2})
			require.NoError(t, err)
			ctx := context.Background()
			id := uuid.Must(uuid.NewV7())
			m := signed(inboxtest.Token, 1, id, activation(id, "later"))
			err = handle(ctx, m)
			require.Error(t, err)
			require.False(t, stream.IsTerminal(err), "naked: it may apply later")
			m.Delivered = 2
			require.True(t, stream.IsTerminal(handle(ctx, m)), "recorded at NATS_MAX_DELIVERIES")
			require.Zero(t, receipts(t, env, id))

			openOrg(t, env.DB, "later")
			keys := [][]byte{[]byte(inboxtest.Token)}
			for _, want := range []int{1, 0} {
				rep, err := env.Inbox.ReplayNATSFailed(ctx, keys, nil)
				require.NoError(t, err)
				require.Equal(t, want, rep.Replayed)
			}
			require.Equal(t, 1, entries(t, env, id))
			require.Zero(t, env.DB.Count(t, `SELECT count(*) FROM ledger_nats_failed`))
		})
	})
}

// TestLedgerOverJetStream: the ledger consumes a real JetStream server
// (in-process, a private store) with a durable of its own, fed by labeling's
// publisher: each event published is applied once, on both dialects.
func TestLedgerOverJetStream(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		s := natstest.Start(t)
		logger := slog.New(slog.DiscardHandler)
		ctx := context.Background()

		env := setupLedger(t, d, "ledger_stream_"+string(d))
		const durable = "ledger"
		pub, err := stream.NewPublisher(stream.PublisherConfig{URL: s.ClientURL(), DuplicateWindow: time.Minute,
			Key: []byte(inboxtest.Token), Consumers: []string{durable}}, logger)
		require.NoError(t, err)
		require.NoError(t, pub.Start(ctx))
		t.Cleanup(func() { _ = pub.Stop(context.Background()) })
		handle, err := env.Inbox.NATSHandler(inbox.NATSConfig{Key: []byte(inboxtest.Token), MaxDeliveries: 10})
		require.NoError(t, err)
		cons, err := stream.NewConsumer(stream.ConsumerConfig{URL: s.ClientURL(), Durable: durable,
			NakBase: 50 * time.Millisecond, NakMax: 200 * time.Millisecond}, handle, logger)
		require.NoError(t, err)
		require.NoError(t, cons.Start(ctx))
		t.Cleanup(func() { _ = cons.Stop(context.Background()) })

		ids := make([]uuid.UUID, 3)
		for i := range ids {
			ids[i] = uuid.Must(uuid.NewV7())
			m := outbox.Message{ID: ids[i], Tag: ledger.EventType, Payload: json.RawMessage(activationPayload("open")),
				CreatedAt: time.Now().UnixMilli(), Attempt: 1}
			require.Eventually(t, func() bool {
				pctx, cancel := context.WithTimeout(ctx, time.Second)
				defer cancel()
				return pub.Publish(pctx, m) == nil
			}, 15*time.Second, 20*time.Millisecond, "published")
		}
		require.Eventually(t, func() bool {
			return env.DB.Count(t, `SELECT count(*) FROM ledger_entries`) == len(ids)
		}, 15*time.Second, 10*time.Millisecond, "every event applied")
		for _, id := range ids {
			require.Equal(t, 1, entries(t, env, id))
			require.Equal(t, 1, receipts(t, env, id))
		}
	})
}

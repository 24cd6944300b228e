package billing_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

func TestReplayNATSFailed(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		// recordWrongKey has billing, keyed with another token than labeling's,
		// record n genuine activations of org, as issue 25 reproduced.
		recordWrongKey := func(t *testing.T, b *bundle, org uuid.UUID, n int) {
			t.Helper()
			wrong, err := b.svc.NATSHandler(billing.NATSConfig{Key: []byte("not-labelings-token")})
			require.NoError(t, err)
			for i := range n {
				ev := newEvent(billing.RuleActivated, org)
				require.True(t, terminated(wrong(context.Background(), natsMsg(uint64(i+1), ev.ID, ev.body()))))
			}
			require.Equal(t, n, b.count(t, "billing_nats_failed"))
			require.Nil(t, b.activeRules(t, org))
		}
		keys := [][]byte{[]byte(token)}

		t.Run("applies records that verify under the current key once, deletes them, and a second run applies nothing", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			recordWrongKey(t, b, org, 3)
			last := b.lastNATSFailed(t)
			rep, err := b.svc.ReplayNATSFailed(context.Background(), keys, nil)
			require.NoError(t, err)
			require.Equal(t, inbox.ReplayReport{Records: 3, Replayed: 3, Stayed: map[string]int{}, Last: last}, rep)
			require.Equal(t, "replayed 3 of 3 records", rep.String())
			require.EqualValues(t, 3, *b.activeRules(t, org))
			require.Equal(t, 3, b.count(t, "billing_receipts"))
			require.Zero(t, b.count(t, "billing_nats_failed"))

			rep, err = b.svc.ReplayNATSFailed(context.Background(), keys, nil)
			require.NoError(t, err)
			require.Equal(t, inbox.ReplayReport{Records: 0, Replayed: 0, Stayed: map[string]int{}}, rep)
			require.EqualValues(t, 3, *b.activeRules(t, org), "nothing applied twice")
		})

		t.Run("the console's KeyReplayer applies the selected records once, as the command does", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			recordWrongKey(t, b, org, 2)
			rows, err := billing.ListNATSFailed(context.Background(), b.db.DB)
			require.NoError(t, err)
			r := billing.KeyReplayer{Service: b.svc, Keys: keys}
			replayed, total, err := r.Replay(context.Background(), []int64{rows[0].ID})
			require.NoError(t, err)
			require.Equal(t, [2]int{1, 1}, [2]int{replayed, total})
			require.EqualValues(t, 1, *b.activeRules(t, org))
			replayed, total, err = r.Replay(context.Background(), nil)
			require.NoError(t, err)
			require.Equal(t, [2]int{1, 1}, [2]int{replayed, total}, "all: the one record left")
			require.EqualValues(t, 2, *b.activeRules(t, org))
			require.Zero(t, b.count(t, "billing_nats_failed"))
		})

		t.Run("a record whose event was applied before is deleted and applies nothing (a crash between apply and delete)", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			ev := newEvent(billing.RuleActivated, org)
			m := natsMsg(1, ev.ID, ev.body())
			require.NoError(t, b.handler(t, 0)(context.Background(), m))
			wrong, err := b.svc.NATSHandler(billing.NATSConfig{Key: []byte("not-labelings-token")})
			require.NoError(t, err)
			m.Stored = m.Stored.Add(1) // the same event recorded, as if its record survived its apply
			require.True(t, terminated(wrong(context.Background(), m)))
			rep, err := b.svc.ReplayNATSFailed(context.Background(), keys, nil)
			require.NoError(t, err)
			require.Equal(t, 1, rep.Replayed)
			require.EqualValues(t, 1, *b.activeRules(t, org), "the receipt dedups it")
			require.Zero(t, b.count(t, "billing_nats_failed"))
		})

		t.Run("a record invalid under the current keys stays with its reason, an unknown id is counted and left", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			recordWrongKey(t, b, org, 1)
			rows, err := billing.ListNATSFailed(context.Background(), b.db.DB)
			require.NoError(t, err)
			id := rows[0].ID
			for range 2 { // a second run keeps the first reason once
				rep, err := b.svc.ReplayNATSFailed(context.Background(), [][]byte{[]byte("yet-another-token")}, []int64{id, id + 1000})
				require.NoError(t, err)
				require.Equal(t, inbox.ReplayReport{Records: 2, Replayed: 0, Stayed: map[string]int{
					inbox.StayedSignature: 1, inbox.StayedNoSuchRecord: 1}, Last: id}, rep)
			}
			require.Nil(t, b.activeRules(t, org))
			rows, err = billing.ListNATSFailed(context.Background(), b.db.DB)
			require.NoError(t, err)
			require.Len(t, rows, 1)
			require.Regexp(t, `^replay refused: signature invalid under the current keys: signature invalid: .*; recorded: signature invalid: [^;]*$`, rows[0].Reason)
		})

		t.Run("a record from before migration 00004 stays: it has no signature to check", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			ev := newEvent(billing.RuleActivated, org)
			b.db.Exec(t, `INSERT INTO billing_nats_failed (stream_seq, subject, msg_id, payload, reason, deliveries, failed_at)
				VALUES (1, $1, $2, $3, 'signature invalid', 1, 0)`, []byte(natsSubject), []byte(ev.ID), []byte(ev.body()))
			last := b.lastNATSFailed(t)
			rep, err := b.svc.ReplayNATSFailed(context.Background(), keys, nil)
			require.NoError(t, err)
			require.Equal(t, inbox.ReplayReport{Records: 1, Stayed: map[string]int{inbox.StayedNoSignature: 1}, Last: last}, rep)
			require.Nil(t, b.activeRules(t, org))
			rows, err := billing.ListNATSFailed(context.Background(), b.db.DB)
			require.NoError(t, err)
			require.Contains(t, rows[0].Reason, "before migration 00004")
		})

		t.Run("a replay after a record checks only the records above it", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			recordWrongKey(t, b, org, 3)
			rows, err := billing.ListNATSFailed(context.Background(), b.db.DB)
			require.NoError(t, err)
			rep, err := b.svc.ReplayNATSFailedAfter(context.Background(), keys, rows[0].ID, 0)
			require.NoError(t, err)
			require.Equal(t, inbox.ReplayReport{Records: 2, Replayed: 2, Stayed: map[string]int{}, Last: rows[2].ID}, rep)
			left, err := billing.ListNATSFailed(context.Background(), b.db.DB)
			require.NoError(t, err)
			require.Equal(t, rows[:1], left)
		})

		t.Run("needs a key", func(t *testing.T) {
			t.Parallel()
			_, err := setup(t, freshDB(t, d)).svc.ReplayNATSFailed(context.Background(), nil, nil)
			require.ErrorContains(t, err, "EVENTS_TOKEN")
		})
	})
}

// lastNATSFailed is the id of billing_nats_failed's newest record (0: none).
func (b *bundle) lastNATSFailed(t testing.TB) int64 {
	t.Helper()
	return int64(b.db.Count(t, `SELECT coalesce(max(id), 0) FROM billing_nats_failed`))
}

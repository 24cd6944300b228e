package inbox_test

import (
	"context"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/inboxtest"
)

// TestLedgerNATSFailedBound: the bound of the NATS-failed table costs what it
// drops, not the table: its prune reads only the records not verified when
// recorded (counted by the verifications it makes), never a verified one.
func TestLedgerNATSFailedBound(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("past the bound with verified records only, each forged message costs one verification and is dropped", func(t *testing.T) {
			t.Parallel()
			env := setupLedger(t, d, "ledger_bound_"+string(d))
			var verifications int
			handle, err := env.Inbox.NATSHandlerCountingVerifies(
				inbox.NATSConfig{Key: []byte(inboxtest.Token), MaxFailedRows: 10}, func() { verifications++ })
			require.NoError(t, err)
			ctx := context.Background()
			// 40 that verify but cannot apply (a Nats-Msg-Id not the body's):
			// past the bound, never dropped.
			for i := range 40 {
				id := uuid.Must(uuid.NewV7())
				m := signed(inboxtest.Token, uint64(i+1), uuid.New(), activation(id, "open"))
				require.True(t, stream.IsTerminal(handle(ctx, m)))
			}
			require.Zero(t, verifications, "no unverified record to read")
			for i := range 30 {
				id := uuid.Must(uuid.NewV7())
				require.True(t, stream.IsTerminal(handle(ctx, signed("a-forger", uint64(100+i), id, activation(id, "open")))))
			}
			require.Equal(t, 30, verifications, "each prune read the one forged record it dropped, no verified one")
			require.Equal(t, 40, env.DB.Count(t, `SELECT count(*) FROM ledger_nats_failed`))
			require.Zero(t, env.DB.Count(t, `SELECT count(*) FROM ledger_nats_failed WHERE NOT verified`))
			require.Equal(t, 40, env.DB.Count(t, `SELECT records FROM ledger_nats_failed_size`), "the tally follows")
		})

		t.Run("an unverified record that verifies under the current keys is marked verified, never dropped, and read once", func(t *testing.T) {
			t.Parallel()
			env := setupLedger(t, d, "ledger_reverify_"+string(d))
			ctx := context.Background()
			// Recorded by a billing that did not know the key yet.
			old, err := env.Inbox.NATSHandler(inbox.NATSConfig{Key: []byte("the-old-token")})
			require.NoError(t, err)
			for i := range 3 {
				id := uuid.Must(uuid.NewV7())
				require.True(t, stream.IsTerminal(old(ctx, signed(inboxtest.Token, uint64(i+1), id, activation(id, "open")))))
			}
			require.Equal(t, 3, env.DB.Count(t, `SELECT count(*) FROM ledger_nats_failed WHERE NOT verified`))

			var verifications int
			handle, err := env.Inbox.NATSHandlerCountingVerifies(
				inbox.NATSConfig{Key: []byte(inboxtest.Token), MaxFailedRows: 2}, func() { verifications++ })
			require.NoError(t, err)
			for i := range 2 {
				id := uuid.Must(uuid.NewV7())
				require.True(t, stream.IsTerminal(handle(ctx, signed("a-forger", uint64(10+i), id, activation(id, "open")))))
			}
			require.Equal(t, 3, env.DB.Count(t, `SELECT count(*) FROM ledger_nats_failed`), "the three kept, the forged dropped")
			require.Zero(t, env.DB.Count(t, `SELECT count(*) FROM ledger_nats_failed WHERE NOT verified`))
			require.Equal(t, 3+2, verifications, "the three read once (then marked), each forged one once")
		})
	})
}

// TestLedgerReplayBatches: a replay of every record works in batches, each
// applied in one transaction then deleted in another; stopped within a batch,
// the batches before it stay applied and deleted, and the replay resumes
// after the last record done, applying nothing twice.
func TestLedgerReplayBatches(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("canceled in its second batch, the first stays done and the replay resumes after it", func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			// The second apply commit cancels the replay: that batch is
			// applied, but its records' delete never commits.
			var mu sync.Mutex
			var commits int
			c := ledgerConsumer("ledger_batches_" + string(d))
			c.Committed = func([]inbox.Event[entry]) {
				mu.Lock()
				defer mu.Unlock()
				if commits++; commits == 2 {
					cancel()
				}
			}
			db := dbtest.New(t, d, ledger.Migrations)
			ledgerTables(t, db)
			openOrg(t, db, "open")
			env := inboxtest.New(t, db, c)
			wrong, err := env.Inbox.NATSHandler(inbox.NATSConfig{Key: []byte("not-the-token")})
			require.NoError(t, err)
			var events []uuid.UUID
			for i := range 6 {
				id := uuid.Must(uuid.NewV7())
				events = append(events, id)
				require.True(t, stream.IsTerminal(wrong(context.Background(), signed(inboxtest.Token, uint64(i+1), id, activation(id, "open")))))
			}
			records, err := env.Inbox.ListNATSFailed(context.Background())
			require.NoError(t, err)
			keys := [][]byte{[]byte(inboxtest.Token)}

			rep, err := env.Inbox.ReplayNATSFailedAfter(ctx, keys, 0, 2)
			require.ErrorIs(t, err, context.Canceled)
			require.Equal(t, inbox.ReplayReport{Records: 4, Replayed: 2, Stayed: map[string]int{}, Last: records[1].ID}, rep,
				"the first batch done; the second checked and applied, its delete not committed")
			for i, id := range events {
				require.Equal(t, map[bool]int{true: 1, false: 0}[i < 4], entries(t, env, id), "event %d", i)
			}
			left, err := env.Inbox.ListNATSFailed(context.Background())
			require.NoError(t, err)
			require.Equal(t, records[2:], left, "the first batch's records deleted with its commit, the rest left")

			rep, err = env.Inbox.ReplayNATSFailedAfter(context.Background(), keys, rep.Last, 2)
			require.NoError(t, err)
			require.Equal(t, inbox.ReplayReport{Records: 4, Replayed: 4, Stayed: map[string]int{}, Last: records[5].ID}, rep,
				"resumed after the last record done")
			for _, id := range events {
				require.Equal(t, 1, entries(t, env, id), "applied once: the second batch found its receipts")
			}
			require.Zero(t, env.DB.Count(t, `SELECT count(*) FROM ledger_nats_failed`))
		})
	})
}

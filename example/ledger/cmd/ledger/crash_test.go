//go:build failpoints

package main

import (
	"context"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// TestLedgerCrashPoints: the binary, built with -tags failpoints, killed at
// each of its HTTP crash points leaves the event applied with its receipt or
// not at all; restarted, the sender's redelivery applies it exactly once.
func TestLedgerCrashPoints(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		for _, tc := range []struct {
			name      string
			point     string
			committed bool
		}{
			{"killed before the commit: neither the entry nor its receipt", ledger.FailpointBeforeCommit, false},
			{"killed after the commit, before the answer: both, once", ledger.FailpointAfterCommit, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				db := dbtest.New(t, d, ledger.Migrations)
				n := startLedger(t, db.URL, map[string]string{"FAILPOINTS": tc.point + "=exit"}, "failpoints")
				id := uuid.Must(uuid.NewV7())
				require.Zero(t, n.deliver(t, id, ledger.EventType), "no answer: the process died at the point")
				st := n.p.Wait(t, 30*time.Second)
				ws, ok := st.Sys().(syscall.WaitStatus)
				require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "%s", st)
				want := 0
				if tc.committed {
					want = 1
				}
				require.Equal(t, want, db.Count(t, `SELECT count(*) FROM ledger_entries WHERE event_id = $1`, id.String()))
				require.Equal(t, want, db.Count(t, `SELECT count(*) FROM ledger_receipts WHERE event_id = $1`, id.String()))

				again := startLedger(t, db.URL, nil, "failpoints")
				for range 2 {
					require.Equal(t, http.StatusNoContent, again.deliver(t, id, ledger.EventType))
				}
				require.EqualValues(t, 1, again.count(t))
			})
		}
	})
}

// TestLedgerNATSCrashPoint: killed after the commit and before the ack, the
// binary's message is redelivered (after NATS_ACK_WAIT) to the restarted
// binary, which acks it applying nothing: one entry.
func TestLedgerNATSCrashPoint(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("killed after the commit, before the ack: applied once after the redelivery", func(t *testing.T) {
			t.Parallel()
			js := startJetStream(t)
			db := dbtest.New(t, d, ledger.Migrations)
			env := map[string]string{"NATS_URL": js.url, "NATS_ACK_WAIT": "1s"}
			crashing := map[string]string{"FAILPOINTS": ledger.FailpointNATSAfterCommit + "=exit"}
			for k, v := range env {
				crashing[k] = v
			}
			n := startLedger(t, db.URL, crashing, "failpoints")
			id := uuid.Must(uuid.NewV7())
			js.publish(t, id)
			st := n.p.Wait(t, 30*time.Second)
			ws, ok := st.Sys().(syscall.WaitStatus)
			require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "%s", st)
			require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM ledger_receipts WHERE event_id = $1`, id.String()), "committed before the kill")

			again := startLedger(t, db.URL, env, "failpoints")
			nc, err := nats.Connect(js.url)
			require.NoError(t, err)
			t.Cleanup(nc.Close)
			jsc, err := jetstream.New(nc)
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				c, err := jsc.Consumer(context.Background(), stream.Name, ledger.Durable)
				if err != nil {
					return false
				}
				info, err := c.Info(context.Background())
				return err == nil && info.NumAckPending == 0 && info.NumPending == 0 && info.Delivered.Consumer >= 2
			}, 20*time.Second, 50*time.Millisecond, "the redelivery is acked")
			require.EqualValues(t, 1, again.count(t))
		})
	})
}

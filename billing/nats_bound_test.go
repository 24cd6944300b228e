package billing_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

func failedDropped(t *testing.T) float64 {
	t.Helper()
	families, err := prometheus.DefaultGatherer.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() == "billing_nats_failed_dropped_total" {
			return f.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

func TestNATSFailedBound(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("past the row bound, records whose signature failed are dropped oldest first and counted; verified ones never", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			handle, err := b.svc.NATSHandler(billing.NATSConfig{Key: []byte(token), MaxFailedRows: 3})
			require.NoError(t, err)
			before := failedDropped(t)
			// Two that verify but cannot apply (a Nats-Msg-Id not the body's).
			var kept []string
			for i := range 2 {
				ev := newEvent(billing.RuleActivated, uuid.New())
				m := natsMsg(uint64(i+1), uuid.NewString(), ev.body())
				kept = append(kept, m.MsgID)
				require.True(t, terminated(handle(context.Background(), m)))
			}
			// Four forged.
			var forged []string
			for i := range 4 {
				ev := newEvent(billing.RuleActivated, uuid.New())
				m := natsMsg(uint64(10+i), ev.ID, ev.body())
				m.Signature = "v1=00"
				forged = append(forged, m.MsgID)
				require.True(t, terminated(handle(context.Background(), m)))
			}
			rows, err := billing.ListNATSFailed(context.Background(), b.db.DB)
			require.NoError(t, err)
			var ids []string
			for _, r := range rows {
				ids = append(ids, r.MsgID)
			}
			require.Equal(t, append(kept, forged[3]), ids, "the oldest forged dropped, the verified kept")
			require.GreaterOrEqual(t, failedDropped(t)-before, 3.0)

			// Only verified ones left past the bound: they all stay.
			for i := range 3 {
				ev := newEvent(billing.RuleActivated, uuid.New())
				require.True(t, terminated(handle(context.Background(), natsMsg(uint64(20+i), uuid.NewString(), ev.body()))))
			}
			require.Equal(t, 5, b.count(t, "billing_nats_failed"), "2 + 3 verified, past the bound of 3, the forged one dropped")
		})

		t.Run("past the byte bound, forged records are dropped", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			ev := newEvent(billing.RuleActivated, uuid.New())
			size := int64(len(ev.body()))
			handle, err := b.svc.NATSHandler(billing.NATSConfig{Key: []byte(token), MaxFailedBytes: 2*size + size/2})
			require.NoError(t, err)
			for i := range 5 {
				ev := newEvent(billing.RuleActivated, uuid.New())
				m := natsMsg(uint64(i+1), ev.ID, ev.body())
				m.Signature = ""
				require.True(t, terminated(handle(context.Background(), m)))
			}
			require.Equal(t, 2, b.count(t, "billing_nats_failed"))
		})
	})
}

package outbox_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

func TestBacklogCollector(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		gather := func(t *testing.T, c prometheus.Collector) map[string]float64 {
			reg := prometheus.NewPedanticRegistry()
			require.NoError(t, reg.Register(c))
			families, err := reg.Gather()
			require.NoError(t, err)
			got := map[string]float64{}
			for _, f := range families {
				got[f.GetName()] = f.GetMetric()[0].GetGauge().GetValue()
			}
			return got
		}

		t.Run("reports the oldest pending row's age, the pending rows and the dead-letter size", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			ids := appendEvents(t, db, things(4)...)
			old := time.Now().Add(-time.Minute).UnixMilli()
			exec(t, db, `UPDATE outbox_events SET created_at = $2 WHERE id = $1`, ids[0], old)
			exec(t, db, `UPDATE outbox_events SET created_at = $2, processed_at = $3 WHERE id = $1`, ids[1], old-60000, old)
			for _, id := range ids[2:] {
				exec(t, db, `UPDATE outbox_events SET created_at = $2, failed_at = $3 WHERE id = $1`, id, old-60000, old)
			}

			got := gather(t, outbox.NewBacklogCollector(storeOf(t, db)))
			require.Equal(t, 2.0, got["outbox_failed_rows"])
			require.Equal(t, 1.0, got["outbox_pending_rows"], "neither the processed row nor the failed ones")
			age := got["outbox_oldest_pending_age_seconds"]
			require.GreaterOrEqual(t, age, 60.0, "the oldest pending row, not a processed or failed one")
			require.Less(t, age, 120.0)
		})

		t.Run("an empty outbox has no age", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			got := gather(t, outbox.NewBacklogCollector(storeOf(t, db)))
			require.Equal(t, map[string]float64{"outbox_failed_rows": 0, "outbox_oldest_pending_age_seconds": 0, "outbox_pending_rows": 0}, got)
		})

		t.Run("an unreachable database leaves the metrics out instead of failing the scrape", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			c := outbox.NewBacklogCollector(storeOf(t, db))
			db.Close()
			require.Empty(t, gather(t, c))
		})
	})
}

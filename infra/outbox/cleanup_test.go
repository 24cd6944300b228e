package outbox_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

func TestProcessedRetention(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)
		const keep = 7 * 24 * time.Hour
		now := time.Now()
		old := now.Add(-keep - time.Hour).UnixMilli()
		recent := now.Add(-keep + time.Hour).UnixMilli()

		// More than two chunks of old processed rows, and one row of every kind to keep.
		const oldRows = 2*retention.DefaultChunk + 500
		insertOld := `
		INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, processed_at)
		SELECT gen_random_uuid(), 'Thing', '{}', $1::bigint - g, $1::bigint - g, 1, $1::bigint
		FROM generate_series(1, $2::int) g`
		if d == sqldb.SQLite {
			insertOld = `
			WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < $2)
			INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, processed_at)
			SELECT lower(hex(randomblob(16))), 'Thing', '{}', $1 - n, $1 - n, 1, $1 FROM g`
		}
		exec(t, db, insertOld, old, oldRows)
		ids := appendEvents(t, db, things(3)...)
		failed, pending, processedRecently := ids[0], ids[1], ids[2]
		exec(t, db, `UPDATE outbox_events SET created_at = $2, attempts = 10, failed_at = $2 WHERE id = $1`, failed, old)
		exec(t, db, `UPDATE outbox_events SET created_at = $2, available_at = $2 WHERE id = $1`, pending, old)
		exec(t, db, `UPDATE outbox_events SET attempts = 1, processed_at = $2 WHERE id = $1`, processedRecently, recent)

		c := retention.New(retention.Config{Interval: time.Hour}, []retention.Policy{outbox.ProcessedRetention(storeOf(t, db), keep)}, testLogger(t))

		t.Run("deletes old processed rows and keeps failed, pending and recent ones", func(t *testing.T) {
			deleted, err := c.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, map[string]int64{"outbox_events": oldRows}, deleted)
			left := allRows(t, db)
			require.Len(t, left, 3)
			require.ElementsMatch(t, ids, []uuid.UUID{left[0].ID, left[1].ID, left[2].ID})
		})

		t.Run("running again deletes nothing more", func(t *testing.T) {
			deleted, err := c.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, map[string]int64{"outbox_events": 0}, deleted)
			require.Len(t, allRows(t, db), 3)
		})
	})
}

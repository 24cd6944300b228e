package billing_test

import (
	"encoding/json"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

// upgraded writes org's quota row as a billing older than migration 00006
// left it: n active rules, version 0, no QuotaChanged row.
func upgraded(t *testing.T, db *dbtest.DB, org uuid.UUID, n, version int64) {
	t.Helper()
	db.Exec(t, `INSERT INTO billing_quota (org_id, active_rules, updated_at, version) VALUES ($1, $2, 1, $3)`, org.String(), n, version)
}

// caughtUp reads billing_outbox_events' payloads by org, checking each is a
// QuotaChanged the relay delivers (Validate) with no sourceEventId.
func caughtUp(t *testing.T, db *dbtest.DB) map[uuid.UUID][]billing.QuotaChanged {
	t.Helper()
	rows := db.Query(t, `SELECT event_tag, CAST(payload AS text) FROM billing_outbox_events`)
	out := map[uuid.UUID][]billing.QuotaChanged{}
	for rows.Next() {
		var tag, payload string
		require.NoError(t, rows.Scan(&tag, &payload))
		require.Equal(t, billing.QuotaChangedTag, tag)
		var raw map[string]any
		require.NoError(t, json.Unmarshal([]byte(payload), &raw))
		require.NotContains(t, raw, "sourceEventId", "no event made the count: none is named")
		var c billing.QuotaChanged
		require.NoError(t, json.Unmarshal([]byte(payload), &c))
		require.NoError(t, c.Validate(), "the relay delivers it")
		out[c.OrgID] = append(out[c.OrgID], c)
	}
	require.NoError(t, rows.Err())
	return out
}

func version(t *testing.T, db *dbtest.DB, org uuid.UUID) int64 {
	t.Helper()
	var v int64
	require.NoError(t, db.QueryRow(`SELECT version FROM billing_quota WHERE org_id = $1`, org.String()).Scan(&v))
	return v
}

func TestCatchUp(t *testing.T) {
	t.Parallel()

	t.Run("each unversioned org gets one QuotaChanged of version 1 with its count, across batches; a versioned org none; a second run nothing", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
			db := dbtest.New(t, d, migrations.Billing)
			want := map[uuid.UUID][]billing.QuotaChanged{}
			for i := range 7 {
				org := uuid.New()
				upgraded(t, db, org, int64(i*3-2), 0) // a count of -2 too: a deactivation applied before its activation
				want[org] = []billing.QuotaChanged{{OrgID: org, ActiveRules: int64(i*3 - 2), Version: 1}}
			}
			versioned := uuid.New()
			upgraded(t, db, versioned, 5, 4)
			n := nudges{}

			appended, err := billing.CatchUp(t.Context(), db.DB, 3, &n)
			require.NoError(t, err)
			require.Equal(t, 7, appended)
			require.Equal(t, want, caughtUp(t, db))
			require.EqualValues(t, 3, n.n.Load(), "the relay nudged after each batch that appended")
			for org := range want {
				require.EqualValues(t, 1, version(t, db, org))
			}
			require.EqualValues(t, 4, version(t, db, versioned), "a versioned org untouched")

			appended, err = billing.CatchUp(t.Context(), db.DB, 3, &n)
			require.NoError(t, err)
			require.Zero(t, appended)
			require.Len(t, caughtUp(t, db), 7)
		})
	})

	t.Run("catch-ups racing append one row per org between them", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
			db := dbtest.New(t, d, migrations.Billing)
			const orgs = 600
			counts := map[uuid.UUID]int64{}
			for i := range orgs {
				org := uuid.New()
				upgraded(t, db, org, int64(i%9), 0)
				counts[org] = int64(i % 9)
			}
			var wg sync.WaitGroup
			totals := make([]int, 4)
			for i := range totals {
				wg.Go(func() {
					n, err := billing.CatchUp(t.Context(), db.DB, 50, nil)
					require.NoError(t, err)
					totals[i] = n
				})
			}
			wg.Wait()
			sum := 0
			for _, n := range totals {
				sum += n
			}
			require.Equal(t, orgs, sum, "each org counted by one catch-up: %v", totals)
			got := caughtUp(t, db)
			require.Len(t, got, orgs)
			for org, rows := range got {
				require.Equal(t, []billing.QuotaChanged{{OrgID: org, ActiveRules: counts[org], Version: 1}}, rows)
			}
		})
	})

	t.Run("a change before the catch-up takes version 1 and the org is skipped; a change after it takes version 2", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
			db := dbtest.New(t, d, migrations.Billing)
			b := setup(t, db)
			before, after := uuid.New(), uuid.New()
			upgraded(t, db, before, 3, 0)
			upgraded(t, db, after, 5, 0)
			first := changeOf(before, 1)
			_, err := b.svc.Apply(t.Context(), first)
			require.NoError(t, err)

			appended, err := billing.CatchUp(t.Context(), db.DB, billing.CatchUpBatch, nil)
			require.NoError(t, err)
			require.Equal(t, 1, appended, "the org changed since the upgrade has its row already")
			next := changeOf(after, -1)
			_, err = b.svc.Apply(t.Context(), next)
			require.NoError(t, err)

			requireRows(t, b.outboxRows(t), []billing.QuotaChanged{
				quotaChanged(before, 4, 1, first),
				{OrgID: after, ActiveRules: 5, Version: 1},
				quotaChanged(after, 4, 2, next),
			})
		})
	})
}

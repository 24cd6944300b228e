package billing_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

// bodyAt is ev's delivery body with occurredAt at.
func (ev event) bodyAt(at time.Time) string {
	return fmt.Sprintf(`{"id":%q,"type":%q,"occurredAt":%d,"payload":{"orgId":%q,"ruleId":%q}}`,
		ev.ID, ev.Type, at.UnixMilli(), ev.Org, ev.Rule)
}

// A delivery older than RECEIPTS_RETENTION less LateMargin could be a duplicate
// whose receipt retention deleted: it is never applied, over HTTP nor NATS.
func TestLateDelivery(t *testing.T) {
	t.Parallel()
	const retention = 10 * time.Hour // bound: 9h (a margin of a tenth)
	require.Equal(t, time.Hour, inbox.LateMargin(retention))
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		setupLate := func(t *testing.T) *bundle {
			return setup(t, dbtest.New(t, d, migrations.Billing), billing.RefuseOlderThan(retention))
		}

		t.Run("over HTTP, an event past the bound answers 400 event_too_old and changes nothing", func(t *testing.T) {
			t.Parallel()
			b := setupLate(t)
			ev := newEvent(billing.RuleActivated, uuid.New())
			rec := b.deliver(t, ev.bodyAt(time.Now().Add(-9*time.Hour-time.Minute)))
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			require.Equal(t, "event_too_old", errorCode(t, rec))
			require.Contains(t, rec.Body.String(), "RECEIPTS_RETENTION")
			require.Zero(t, b.count(t, "billing_receipts"))
			require.Nil(t, b.activeRules(t, ev.Org))
		})

		t.Run("over HTTP, an event inside the bound is applied", func(t *testing.T) {
			t.Parallel()
			b := setupLate(t)
			ev := newEvent(billing.RuleActivated, uuid.New())
			rec := b.deliver(t, ev.bodyAt(time.Now().Add(-8*time.Hour)))
			require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
			require.EqualValues(t, 1, *b.activeRules(t, ev.Org))
		})

		t.Run("over NATS, an event past the bound is recorded with its reason and terminated, never applied", func(t *testing.T) {
			t.Parallel()
			b := setupLate(t)
			handle := b.handler(t, 0)
			ev := newEvent(billing.RuleActivated, uuid.New())
			err := handle(context.Background(), natsMsg(1, ev.ID, ev.bodyAt(time.Now().Add(-30*24*time.Hour))))
			require.True(t, terminated(err), "got %v", err)
			rows, err := billing.ListNATSFailed(context.Background(), b.db.DB)
			require.NoError(t, err)
			require.Len(t, rows, 1)
			require.Contains(t, rows[0].Reason, "too old")
			require.Zero(t, b.count(t, "billing_receipts"))
			require.Nil(t, b.activeRules(t, ev.Org))
		})

		t.Run("over NATS, an event inside the bound is applied", func(t *testing.T) {
			t.Parallel()
			b := setupLate(t)
			handle := b.handler(t, 0)
			ev := newEvent(billing.RuleActivated, uuid.New())
			require.NoError(t, handle(context.Background(), natsMsg(1, ev.ID, ev.bodyAt(time.Now()))))
			require.EqualValues(t, 1, *b.activeRules(t, ev.Org))
		})
	})
}

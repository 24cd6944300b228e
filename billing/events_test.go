package billing_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/wire"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

// grant is an event type of the tests' own: billing applies it only once a
// handler for it is registered.
const grant = "QuotaGranted"

type grantPayload struct {
	OrgID *string `json:"orgId"`
	Rules int64   `json:"rules"`
}

func grantEffect(p grantPayload) (billing.Effect, error) {
	if p.OrgID == nil {
		return billing.Effect{}, errors.New("orgId is required")
	}
	org, err := wire.ParseID(*p.OrgID)
	if err != nil {
		return billing.Effect{}, errors.New("orgId must be a UUID")
	}
	if p.Rules < 1 {
		return billing.Effect{}, errors.New("rules must be positive")
	}
	return billing.Effect{OrgID: org, Delta: p.Rules}, nil
}

func grantBody(id uuid.UUID, org uuid.UUID, rules int) string {
	return fmt.Sprintf(`{"id":%q,"type":%q,"occurredAt":1767225600000,"payload":{"orgId":%q,"rules":%d}}`, id, grant, org, rules)
}

// deliverOwn is deliver past the OpenAPI check: the contract's spec names the
// types billing ships with, not a test's own.
func (b *bundle) deliverOwn(body string) *httptest.ResponseRecorder {
	rec := httptest.NewRecorder()
	b.e.ServeHTTP(rec, eventRequest(body))
	return rec
}

func TestEventHandlers(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("a type without a handler has no default effect: Apply refuses it and writes nothing", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			ev := billing.Event{ID: uuid.Must(uuid.NewV7()), Type: "RuleRenamed", OccurredAt: 1, Value: billing.Effect{OrgID: org}}
			applied, err := b.svc.Apply(context.Background(), ev)
			require.Nil(t, b.activeRules(t, org), "no +1 by default")
			require.False(t, b.hasReceipt(t, ev.ID.String()))
			require.False(t, applied)
			require.Equal(t, fault.NotImplemented, fault.CodeOf(err), "%v", err)
		})

		t.Run("a well-formed event of a type without a handler answers 501 and changes nothing", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			id, org := uuid.Must(uuid.NewV7()), uuid.New()
			rec := b.deliver(t, grantBody(id, org, 2))
			require.Equal(t, http.StatusNotImplemented, rec.Code, rec.Body.String())
			require.Equal(t, "not_implemented", errorCode(t, rec))
			require.Zero(t, b.count(t, "billing_receipts"))
			require.Nil(t, b.activeRules(t, org))
		})

		t.Run("a registered handler's effect is applied once, however often the event is delivered", func(t *testing.T) {
			t.Parallel()
			b := setup(t, dbtest.New(t, d, migrations.Billing),
				billing.Handling(append(billing.Events(), billing.Handle(grant, grantEffect))...))
			id, org := uuid.Must(uuid.NewV7()), uuid.New()
			for range 3 {
				rec := b.deliverOwn(grantBody(id, org, 5))
				require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
			}
			require.EqualValues(t, 5, *b.activeRules(t, org))
			require.Equal(t, 1, b.count(t, "billing_receipts"))
			rec := b.deliver(t, newEvent(billing.RuleDeactivated, org).body())
			require.Equal(t, http.StatusNoContent, rec.Code, "the registry's own types still apply beside it")
			require.EqualValues(t, 4, *b.activeRules(t, org))
		})

		t.Run("a payload the handler refuses answers 400 and changes nothing", func(t *testing.T) {
			t.Parallel()
			b := setup(t, dbtest.New(t, d, migrations.Billing),
				billing.Handling(append(billing.Events(), billing.Handle(grant, grantEffect))...))
			org := uuid.New()
			for name, body := range map[string]string{
				"refused by the handler":      grantBody(uuid.Must(uuid.NewV7()), org, 0),
				"a field of the wrong kind":   fmt.Sprintf(`{"id":%q,"type":%q,"occurredAt":1,"payload":{"orgId":%q,"rules":"many"}}`, uuid.Must(uuid.NewV7()), grant, org),
				"a payload without its orgId": fmt.Sprintf(`{"id":%q,"type":%q,"occurredAt":1,"payload":{"rules":1}}`, uuid.Must(uuid.NewV7()), grant),
			} {
				rec := b.deliverOwn(body)
				require.Equal(t, http.StatusBadRequest, rec.Code, "%s: %s", name, rec.Body.String())
				require.Contains(t, rec.Body.String(), "payload of "+grant, name)
				require.NotContains(t, rec.Body.String(), "billing_test", "no Go type is echoed")
			}
			require.Zero(t, b.count(t, "billing_receipts"))
			require.Nil(t, b.activeRules(t, org))
		})

		t.Run("a handler registered over its type's own is refused at start", func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, d, migrations.Billing)
			logger := slog.New(slog.NewTextHandler(io.Discard, nil))
			require.PanicsWithValue(t, `billing: two handlers for event type "RuleActivated"`, func() {
				billing.NewService(db.DB, logger, billing.Handling(append(billing.Events(), billing.Handle(billing.RuleActivated, grantEffect))...))
			})
			require.Panics(t, func() { billing.NewService(db.DB, logger, billing.Handling(billing.EventHandler{})) }, "a handler not built by Handle")
		})
	})
}

package delivery_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/delivery"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/apitest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

// billingServer runs billing's real handler on a fresh database behind a test
// server whose every exchange is checked against the OpenAPI spec. While down is
// true it answers 503 to everything, as a billing with its database gone would.
func billingServer(t *testing.T, down *atomic.Bool, opts ...billing.Option) (*billing.Service, *pgtest.DB, string) {
	t.Helper()
	db := pgtest.New(t, migrations.Billing)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := billing.NewService(postgres.NewDB(db.Pool), logger, opts...)
	h, err := billing.NewHandler(svc, billing.Config{EventsToken: token, ReceiptsRetention: time.Hour})
	require.NoError(t, err)
	e := web.New(logger, db.Pool)
	h.Register(e, auth.Disabled())
	checked := apitest.Handler(t, e)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, `{"error":{"code":"unavailable","message":"down"}}`, http.StatusServiceUnavailable)
			return
		}
		checked.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return svc, db, srv.URL
}

// TestAgainstBilling sends through the client to billing's real handler on a real
// database, so the two halves cannot drift apart on the wire.
func TestAgainstBilling(t *testing.T) {
	t.Parallel()

	setupBilling := func(t *testing.T) (*billing.Service, string) {
		svc, _, url := billingServer(t, new(atomic.Bool))
		return svc, url
	}
	msg := func(tag string, org uuid.UUID, payload string) outbox.Message {
		if payload == "" {
			payload = fmt.Sprintf(`{"orgId":%q,"ruleId":%q}`, org, uuid.New())
		}
		return outbox.Message{ID: uuid.Must(uuid.NewV7()), Tag: tag, Payload: json.RawMessage(payload), CreatedAt: time.Now().UnixMilli(), Attempt: 1}
	}

	t.Run("an event older than the receipts' retention less its margin fails the row at once, saying why", func(t *testing.T) {
		t.Parallel()
		svc, _, url := billingServer(t, new(atomic.Bool), billing.RefuseOlderThan(time.Hour))
		c := newClient(t, delivery.Config{BaseURL: url, Token: token})
		org := uuid.New()
		m := msg(billing.RuleActivated, org, "")
		m.CreatedAt = time.Now().Add(-2 * time.Hour).UnixMilli()
		err := c.Deliver(context.Background(), m)
		require.True(t, outbox.IsPermanent(err), "dead-lettered, not retried: %v", err)
		require.ErrorContains(t, err, "event_too_old")
		q, err := svc.Quota(context.Background(), org)
		require.NoError(t, err)
		require.Zero(t, q.ActiveRules)
	})

	t.Run("an event delivered twice is accepted twice and applied once", func(t *testing.T) {
		t.Parallel()
		svc, url := setupBilling(t)
		c := newClient(t, delivery.Config{BaseURL: url, Token: token})
		org := uuid.New()
		m := msg(billing.RuleActivated, org, "")
		require.NoError(t, c.Deliver(context.Background(), m))
		m.Attempt = 2
		require.NoError(t, c.Deliver(context.Background(), m))
		require.NoError(t, c.Deliver(context.Background(), msg(billing.RuleDeactivated, org, "")))
		require.NoError(t, c.Deliver(context.Background(), msg(billing.RuleActivated, org, "")))
		q, err := svc.Quota(context.Background(), org)
		require.NoError(t, err)
		require.EqualValues(t, 1, q.ActiveRules)
	})

	t.Run("a wrong token is retried, not failed", func(t *testing.T) {
		t.Parallel()
		_, url := setupBilling(t)
		c := newClient(t, delivery.Config{BaseURL: url, Token: "wrong"})
		err := c.Deliver(context.Background(), msg(billing.RuleActivated, uuid.New(), ""))
		require.ErrorContains(t, err, "401")
		require.False(t, outbox.IsPermanent(err))
	})

	t.Run("an unknown type is retried, not failed", func(t *testing.T) {
		t.Parallel()
		_, url := setupBilling(t)
		c := newClient(t, delivery.Config{BaseURL: url, Token: token})
		err := c.Deliver(context.Background(), msg("RuleRenamed", uuid.New(), `{"whatever":1}`))
		require.ErrorContains(t, err, "501")
		require.False(t, outbox.IsPermanent(err))
	})

	t.Run("a payload billing refuses fails at once", func(t *testing.T) {
		t.Parallel()
		_, url := setupBilling(t)
		c := newClient(t, delivery.Config{BaseURL: url, Token: token})
		err := c.Deliver(context.Background(), msg(billing.RuleActivated, uuid.New(), `{"orgId":"acme","ruleId":"x"}`))
		require.ErrorContains(t, err, "400")
		require.ErrorContains(t, err, "orgId must be a UUID")
		require.True(t, outbox.IsPermanent(err))
	})
}

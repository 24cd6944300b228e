package webhook_test

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/infra/webhook"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

// quotaChanged stands for billing's event.
type quotaChanged struct {
	OrgID       uuid.UUID `json:"orgId"`
	ActiveRules int64     `json:"activeRules"`
}

func (quotaChanged) EventTag() string { return "QuotaChanged" }

// TestThroughTheRelay: billing's wiring in small: a row of billing's outbox
// table, its relay, the provider call as its subscriber. The provider asks
// for a later retry (503, Retry-After: 90); the relay waits that long, and
// the retry carries the same key and webhook-id with a new timestamp and
// signature, which the library verifies; the 2xx settles the row.
func TestThroughTheRelay(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	p := newProvider(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 1 {
			w.Header().Set("Retry-After", "90")
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	db := dbtest.New(t, sqldb.SQLite, migrations.Billing)
	store := outbox.NewSQLiteStore(db.SQLite, outbox.WithTable("billing_outbox_events"))
	var id uuid.UUID
	require.NoError(t, db.SQLite.InTx(t.Context(), sqldb.TxOptions{}, func(tx sqlite.Tx) error {
		var err error
		id, err = outbox.Append(t.Context(), store, tx, quotaChanged{OrgID: uuid.New(), ActiveRules: 2})
		return err
	}))

	var now atomic.Int64
	now.Store(time.Now().UnixMilli())
	relay, err := outbox.NewRelay(store, outbox.Config{
		PollInterval: time.Second, ClaimSize: 10, HandlerTimeout: 5 * time.Second, Lease: time.Minute,
		MaxAttempts: 5, RetryBase: time.Second, RetryMax: time.Hour, ProcessedRetention: time.Hour,
		Now: func() time.Time { return time.UnixMilli(now.Load()) },
	}, []outbox.Subscriber{webhook.Subscriber[quotaChanged](newClient(t, p.URL, secret))}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, relay.Stop(context.Background())) })

	n, err := relay.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	var available int64
	var lastError string
	require.NoError(t, db.QueryRow(`SELECT available_at, last_error FROM billing_outbox_events WHERE id = $1`, id).Scan(&available, &lastError))
	require.Equal(t, now.Load()+90_000, available, "the relay waits what Retry-After asks (its own backoff is 1s)")
	require.Contains(t, lastError, "503")

	now.Store(available)
	n, err = relay.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM billing_outbox_events WHERE id = $1 AND processed_at IS NOT NULL`, id))

	got := p.requests()
	require.Len(t, got, 2)
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	for _, r := range got {
		require.Equal(t, id.String(), r.header.Get("Idempotency-Key"), "the same key on every attempt")
		require.Equal(t, id.String(), r.header.Get("webhook-id"))
		require.NoError(t, wh.Verify(r.body, r.header))
	}
	require.Equal(t, got[0].body, got[1].body, "the same body")
}

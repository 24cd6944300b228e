package webhook_test

import (
	"context"
	"io"
	"net/http"
	"strings"
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
	"github.com/acme/outboxpair/internal/testsupport/relaytest"
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

// TestURLCredentialsAreNeverQuoted: PROVIDER_URL carries a user, a password
// and a token in its query. Whether nothing listens, the provider answers 500
// (retried) or 400 (dead-lettered) with an error page that echoes the request
// target, or it redirects repeating the query, the row's last_error and every
// log line quote the call without them.
func TestURLCredentialsAreNeverQuoted(t *testing.T) {
	t.Parallel()
	echo := func(code int) func(http.ResponseWriter, *http.Request, int) {
		return func(w http.ResponseWriter, r *http.Request, _ int) {
			w.WriteHeader(code)
			_, _ = io.WriteString(w, "cannot take POST "+r.URL.RequestURI())
		}
	}
	redirect := func(w http.ResponseWriter, r *http.Request, _ int) {
		http.Redirect(w, r, "https://"+r.Host+r.URL.RequestURI(), http.StatusPermanentRedirect)
	}
	for _, c := range []struct {
		name   string
		answer func(http.ResponseWriter, *http.Request, int) // nil: nothing listens
		want   string                                        // in last_error; {addr} is the provider's
		failed bool
	}{
		{"a refused connection is retried, quoted without them", nil,
			`Post "http://{addr}/hooks": dial tcp {addr}: connect: connection refused`, false},
		{"a 500 is retried, its answer quoted without them", echo(http.StatusInternalServerError),
			"provider answered 500 Internal Server Error: cannot take POST /hooks?***", false},
		{"a 400 is dead-lettered, its answer quoted without them", echo(http.StatusBadRequest),
			"provider answered 400 Bad Request: cannot take POST /hooks?***", true},
		{"a redirect repeating the query is quoted without it", redirect,
			`redirect to "https://{addr}/hooks" not followed`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
				addr := relaytest.ClosedAddr(t)
				if c.answer != nil {
					addr = strings.TrimPrefix(newProvider(t, c.answer).URL, "http://")
				}
				log := relaytest.NewLog()
				client, err := webhook.New(webhook.Config{
					URL: "http://user:pw@" + addr + "/hooks?token=s3cret", Secrets: []string{newSecret(t)}, Timeout: 5 * time.Second,
				}, log.Logger)
				require.NoError(t, err)
				f := relaytest.Fail(t, dbtest.New(t, d, migrations.Billing), "billing_outbox_events", "QuotaChanged",
					`{"orgId":"0197a3c2-6a1e-7c3b-9f1d-2b4e5a6c7d8e","activeRules":3}`, webhook.Subscriber[quotaChanged](client), log)
				require.Contains(t, f.LastError, strings.ReplaceAll(c.want, "{addr}", addr))
				require.Equal(t, c.failed, f.Failed, "dead-lettered")
				for _, text := range []string{f.LastError, f.Log} {
					require.NotContains(t, text, "s3cret")
					require.NotContains(t, text, "pw")
					require.NotContains(t, text, "user")
				}
			})
		})
	}
}

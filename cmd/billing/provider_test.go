package main

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/standin"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

// standIn is the stand-in provider in this process, verifying with
// providerSecret; its /applied is read through its handler.
func standIn(t *testing.T) *httptest.Server {
	t.Helper()
	s, err := standin.Open(t.Context(), standin.Config{Secret: providerSecret, DB: filepath.Join(t.TempDir(), "provider.db")},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return srv
}

func appliedAt(t *testing.T, base string) standin.Applied {
	t.Helper()
	resp, err := http.Get(base + "/applied")
	require.NoError(t, err)
	defer resp.Body.Close()
	var a standin.Applied
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&a))
	return a
}

// deliverTwice delivers a RuleActivated of org to billing at base, twice (the
// second a duplicate).
func deliverTwice(t *testing.T, base, tok string, org uuid.UUID) {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	body := fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":`+occurredNow()+`,"payload":{"orgId":%q,"ruleId":%q}}`, id, org, uuid.New())
	for range 2 {
		req, err := http.NewRequest(http.MethodPost, base+"/internal/v1/events", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Idempotency-Key", id.String())
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
	}
}

func TestServeCallsTheProvider(t *testing.T) {
	t.Parallel()
	const tok = "cmd-test-token"

	t.Run("with PROVIDER_URL, an applied quota change reaches the provider once, signed; a duplicate delivery calls nothing", func(t *testing.T) {
		t.Parallel()
		provider := standIn(t)
		s := startServer(t, env("DATABASE_URL="+pgtest.Empty(t).URL, "EVENTS_TOKEN="+tok, "HTTP_ADDR=127.0.0.1:0", "AUTH_DISABLED=true",
			"PROVIDER_URL="+provider.URL+standin.Path, "PROVIDER_SECRET="+providerSecret))
		org := uuid.New()
		deliverTwice(t, "http://"+s.addr, tok, org)
		require.Eventually(t, func() bool { return appliedAt(t, provider.URL).Applied == 1 }, 20*time.Second, 20*time.Millisecond,
			"the QuotaChanged row reaches the provider")
		a := appliedAt(t, provider.URL)
		require.Equal(t, map[string]int64{org.String(): 1}, a.ByOrg)
		require.Zero(t, a.Rejected, "every call verified")
		require.Zero(t, a.Duplicates)
		require.NotContains(t, s.Stdout.String()+s.Stderr.String(), "PROVIDER_URL is not set")
		require.Equal(t, 0, s.stop(t), s.Stderr.String())
	})

	t.Run("without PROVIDER_URL, no QuotaChanged row is appended, the backlog gauges are exported, and one INFO line says so", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
			db := dbtest.New(t, d, migrations.Billing)
			// A row pending from a time with a provider: it stays, and the gauge sees it.
			db.Exec(t, `INSERT INTO billing_outbox_events (id, event_tag, payload, created_at, available_at, attempts)
				VALUES ($1, 'QuotaChanged', '{}', $2, $2, 0)`, uuid.Must(uuid.NewV7()).String(), time.Now().Add(-time.Hour).UnixMilli())
			s := startServer(t, env("DATABASE_URL="+db.URL, "EVENTS_TOKEN="+tok, "HTTP_ADDR=127.0.0.1:0", "AUTH_DISABLED=true"))
			org := uuid.New()
			deliverTwice(t, "http://"+s.addr, tok, org)
			require.EqualValues(t, 1, db.Count(t, `SELECT count(*) FROM billing_outbox_events`), "no row appended, the older one kept")
			var version int64
			require.NoError(t, db.QueryRow(`SELECT version FROM billing_quota WHERE org_id = $1`, org.String()).Scan(&version))
			require.EqualValues(t, 1, version, "the change counted in the org's version all the same")

			resp, err := http.Get("http://" + s.addr + "/metrics")
			require.NoError(t, err)
			metrics, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Regexp(t, `(?m)^billing_outbox_oldest_pending_age_seconds 3[56]\d\d(\.\d+)?$`, string(metrics), "the hour-old pending row, with no relay")
			require.Contains(t, string(metrics), "\nbilling_outbox_failed_rows 0\n")
			require.Contains(t, string(metrics), "\nbilling_outbox_pending_rows 1\n", "the older pending row alone: nothing appended")

			require.Equal(t, 0, s.stop(t), s.Stderr.String())
			lines := 0
			for _, l := range strings.Split(s.Stdout.String()+s.Stderr.String(), "\n") {
				if strings.Contains(l, "PROVIDER_URL is not set") {
					lines++
					require.Contains(t, l, `"level":"INFO"`)
					require.Contains(t, l, "no QuotaChanged row is appended to billing_outbox_events")
				}
			}
			require.Equal(t, 1, lines, s.Stderr.String())
		})
	})

	t.Run("a bad PROVIDER_SECRET stops start-up with one line naming it, never quoting it", func(t *testing.T) {
		t.Parallel()
		const bad = "whsec_c2hvcnQ="
		r := runCmd(t, env("DATABASE_URL=postgres://postgres@127.0.0.1:5432/x", "EVENTS_TOKEN=x",
			"PROVIDER_URL=http://127.0.0.1:1/webhook", "PROVIDER_SECRET="+bad))
		require.Equal(t, 1, r.code)
		require.True(t, strings.HasPrefix(r.stderr, "billing: PROVIDER_SECRET"), r.stderr)
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
		require.NotContains(t, r.stderr, "c2hvcnQ")
	})
}

package standin_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/standin"
)

// TestRefusals: what the stand-in refuses, and that a refusal applies nothing.
func TestRefusals(t *testing.T) {
	t.Parallel()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	srv, err := standin.Open(t.Context(), standin.Config{Secret: secret, DB: filepath.Join(t.TempDir(), "p.db")}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	h := srv.Handler()
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)

	post := func(body string, header map[string]string) int {
		id := uuid.NewString()
		now := time.Now()
		sig, err := wh.Sign(id, now, []byte(body))
		require.NoError(t, err)
		req := httptest.NewRequest(http.MethodPost, standin.Path, bytes.NewReader([]byte(body)))
		req.Header.Set("Idempotency-Key", id)
		req.Header.Set("webhook-id", id)
		req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
		req.Header.Set("webhook-signature", sig)
		for k, v := range header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	good := `{"id":"` + uuid.NewString() + `","type":"QuotaChanged","occurredAt":5,"payload":{"orgId":"` + uuid.NewString() + `","activeRules":0}}`
	for name, c := range map[string]struct {
		body   string
		header map[string]string
		want   int
	}{
		"another type":       {strings.Replace(good, "QuotaChanged", "RuleActivated", 1), nil, http.StatusBadRequest},
		"no count":           {strings.Replace(good, `,"activeRules":0`, "", 1), nil, http.StatusBadRequest},
		"not JSON":           {"quota", nil, http.StatusBadRequest},
		"no key":             {good, map[string]string{"Idempotency-Key": ""}, http.StatusBadRequest},
		"an old timestamp":   {good, map[string]string{"webhook-timestamp": strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)}, http.StatusUnauthorized},
		"no signature":       {good, map[string]string{"webhook-signature": ""}, http.StatusUnauthorized},
		"a body over 64 KiB": {strings.Repeat(" ", 65<<10) + good, nil, http.StatusRequestEntityTooLarge},
	} {
		require.Equal(t, c.want, post(c.body, c.header), name)
	}
	require.Equal(t, http.StatusOK, post(good, nil), "the good call, for contrast")

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/applied", nil))
	require.Equal(t, http.StatusOK, rec.Code)
	require.Contains(t, rec.Body.String(), `"applied":1,"duplicates":0`, "no refusal applied anything")
	require.Contains(t, rec.Body.String(), `"rejected":2`)
}

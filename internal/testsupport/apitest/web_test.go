package apitest

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

// TestWebEndpointsMatchTheSpec runs the endpoints every service gets from web.New
// through Do, against a real database, so the shared surface matches the spec.
func TestWebEndpointsMatchTheSpec(t *testing.T) {
	t.Parallel()

	db := pgtest.New(t, migrations.Billing)
	e := web.New(slog.New(slog.NewJSONHandler(io.Discard, nil)), db.Pool)

	for _, tt := range []struct {
		name   string
		method string
		path   string
		status int
	}{
		{"healthz answers 200", http.MethodGet, "/healthz", http.StatusOK},
		{"readyz answers 200 while the database answers", http.MethodGet, "/readyz", http.StatusOK},
		{"metrics answers 200", http.MethodGet, "/metrics", http.StatusOK},
		{"an unknown route answers 404 with the error body", http.MethodGet, "/nope", http.StatusNotFound},
		{"a wrong method answers 400 with the error body", http.MethodDelete, "/healthz", http.StatusBadRequest},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rec := Do(t, e, httptest.NewRequest(tt.method, tt.path, nil))
			require.Equal(t, tt.status, rec.Code)
		})
	}

	t.Run("readyz answers 503 with the error body when the database is gone", func(t *testing.T) {
		db.Pool.Close()
		rec := Do(t, e, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	})
}

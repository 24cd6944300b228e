package labeling

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/apitest"
	"github.com/acme/outboxpair/internal/testsupport/authtest"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

// countingNudger counts the nudges a use case sends.
type countingNudger struct{ n atomic.Int64 }

func (c *countingNudger) Nudge() { c.n.Add(1) }

type testBundle struct {
	db     *dbtest.DB
	e      *echo.Echo
	svc    *Service
	nudges *countingNudger
	iss    *authtest.Issuer // nil when the handler's guard is auth.Disabled()
	org    string           // an org with no rules yet
}

// setup is the app on a fresh database of dialect d.
func setup(t *testing.T, d sqldb.Dialect) *testBundle {
	t.Helper()
	db := dbtest.New(t, d, migrations.Labeling)
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	e := web.New(logger, db.DB)
	nudges := &countingNudger{}
	svc := NewService(db.DB, nudges)
	// Authentication is on, as in production: do sends a valid token for the org
	// of each path (auth_test.go attacks it).
	iss := authtest.New(t)
	NewHandler(svc).Register(e, iss.Guard(t, nil))
	return &testBundle{db: db, e: e, svc: svc, nudges: nudges, iss: iss, org: uuid.NewString()}
}

// withOrg returns a bundle on the same database with a fresh org, so subtests can
// share a database (creating one is the slow part) without seeing each other.
func (b *testBundle) withOrg() *testBundle {
	c := *b
	c.org = uuid.NewString()
	return &c
}

// do sends one request through the app, checked against the API spec.
func (b *testBundle) do(t testing.TB, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, r)
	if body != "" {
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	if b.iss != nil {
		req.Header.Set(echo.HeaderAuthorization, "Bearer "+b.iss.ForPath(t, path))
	} else {
		req.Header.Set(echo.HeaderAuthorization, "Bearer unchecked") // the spec asks for one
	}
	return apitest.Do(t, b.e, req)
}

func rulesPath(org string) string { return "/v1/orgs/" + org + "/rules" }

func rulePath(org, id string) string { return rulesPath(org) + "/" + id }

func createJSON(t testing.TB, id, name, pattern, label string) string {
	t.Helper()
	raw, err := json.Marshal(CreateJSON{ID: id, Name: name, Pattern: pattern, Label: label})
	require.NoError(t, err)
	return string(raw)
}

// create stores a rule through the API and returns the response body.
func (b *testBundle) create(t testing.TB, org, id string) RuleJSON {
	t.Helper()
	rec := b.do(t, http.MethodPost, rulesPath(org), createJSON(t, id, "invoices", `^INV-\d+$`, "finance"))
	require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
	return decode[RuleJSON](t, rec)
}

func decode[T any](t testing.TB, rec *httptest.ResponseRecorder) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(rec.Body)
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(&v), "response body")
	return v
}

// requireError checks an error response's status and body code.
func requireError(t testing.TB, rec *httptest.ResponseRecorder, status int, code string) {
	t.Helper()
	require.Equal(t, status, rec.Code, rec.Body.String())
	body := decode[web.ErrorBody](t, rec)
	require.Equal(t, code, body.Error.Code)
	require.NotEmpty(t, body.Error.Message)
}

func (b *testBundle) count(t testing.TB, query string, args ...any) int {
	t.Helper()
	return b.db.Count(t, query, args...)
}

// outboxRow is an outbox row as the tests read it.
type outboxRow struct {
	Tag       string
	Payload   map[string]string
	CreatedAt int64
}

// events returns the outbox rows of b.org in created_at order (ties by id, a
// UUIDv7).
func (b *testBundle) events(t testing.TB) []outboxRow {
	t.Helper()
	rows := b.db.Query(t, `
		SELECT event_tag, payload, created_at FROM outbox_events
		WHERE payload->>'orgId' = $1
		ORDER BY created_at, id`, b.org)
	var out []outboxRow
	for rows.Next() {
		var r outboxRow
		var payload []byte
		require.NoError(t, rows.Scan(&r.Tag, &payload, &r.CreatedAt))
		require.NoError(t, json.Unmarshal(payload, &r.Payload))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

package console_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/console"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/authtest"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

type consoleBundle struct {
	db  *dbtest.DB
	e   *echo.Echo
	iss *authtest.Issuer // nil: AUTH_DISABLED
	// bearer, when set, is sent as the Authorization header.
	bearer string
}

func consoleSetup(t *testing.T, d sqldb.Dialect, authDisabled bool) *consoleBundle {
	t.Helper()
	db := dbtest.New(t, d, migrations.Labeling)
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	e := web.New(logger, db.DB)
	var v *auth.Verifier
	var iss *authtest.Issuer
	if !authDisabled {
		iss = authtest.New(t)
		var err error
		v, err = auth.NewVerifier(iss.Config(), logger)
		require.NoError(t, err)
	}
	ui, err := console.New(console.Info{Service: "labeling", Transport: "http", Database: string(d)}, v, nil, nil)
	require.NoError(t, err)
	console.NewOutbox(ui, console.OutboxConfig{Peer: "billing", Subscriber: "billing", TraceURL: "https://traces.example/t/{trace}"}, db.DB, outbox.NewStore(db.DB)).Register(ui.Group(e))
	return &consoleBundle{db: db, e: e, iss: iss}
}

// insert adds an outbox row; failed rows get failed_at and lastError.
func (b *consoleBundle) insert(t *testing.T, tag, payload string, failed bool, lastError string) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	now := time.Now().UnixMilli()
	var failedAt any
	if failed {
		failedAt = now
	}
	b.db.Exec(t, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, failed_at, last_error, trace_context)
		VALUES ($1, $2, $3, $4, $4, 3, $5, $6, $7)`, id.String(), tag, payload, now, failedAt, lastError,
		`{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)
	return id
}

// get sends a GET from loopback and returns the response; the CSRF cookie, when
// set, is kept in jar.
func (b *consoleBundle) send(t *testing.T, method, path string, form url.Values, jar *string, remote string) *httptest.ResponseRecorder {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req := httptest.NewRequest(method, path, body)
	req.RemoteAddr = remote
	if form != nil {
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationForm)
	}
	if jar != nil && *jar != "" {
		req.AddCookie(&http.Cookie{Name: "console_csrf", Value: *jar})
	}
	if b.bearer != "" {
		req.Header.Set(echo.HeaderAuthorization, "Bearer "+b.bearer)
	}
	rec := httptest.NewRecorder()
	b.e.ServeHTTP(rec, req)
	if jar != nil {
		for _, ck := range rec.Result().Cookies() {
			if ck.Name == "console_csrf" {
				*jar = ck.Value
			}
		}
	}
	return rec
}

const loopback = "127.0.0.1:40000"

// outboxPageSize is the rows of one page of a list.
const outboxPageSize = 50

var csrfInput = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func TestConsole(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		b := consoleSetup(t, d, true)
		pending := b.insert(t, "RuleActivated", `{"ruleId":"p"}`, false, "")
		failed := b.insert(t, "RuleActivated", `{"ruleId":"f"}`, true, "billing answered 500")
		other := b.insert(t, "RuleDeactivated", `{"ruleId":"o"}`, true, "timeout")
		hostile := b.insert(t, "RuleActivated", `{"x":"<script>alert(1)</script>"}`, true, `<img src=x onerror=alert(1)>`)
		b.db.Exec(t, `UPDATE outbox_events SET processed_at = $1 WHERE id = $2`, time.Now().UnixMilli(), pending.String())
		b.insert(t, "RuleActivated", `{"ruleId":"p2"}`, false, "")

		t.Run("every page carries the security headers", func(t *testing.T) {
			rec := b.send(t, http.MethodGet, "/console/", nil, nil, loopback)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			h := rec.Header()
			require.Contains(t, h.Get("Content-Security-Policy"), "default-src 'none'")
			require.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'")
			require.Equal(t, "DENY", h.Get("X-Frame-Options"))
			require.Equal(t, "no-store", h.Get("Cache-Control"))
			rec = b.send(t, http.MethodGet, "/console", nil, nil, loopback)
			require.Equal(t, http.StatusMovedPermanently, rec.Code)
			require.Equal(t, "/console/", rec.Header().Get("Location"))
		})

		t.Run("the overview counts the rows by state and tag and draws the rate", func(t *testing.T) {
			body := b.send(t, http.MethodGet, "/console/", nil, nil, loopback).Body.String()
			require.Regexp(t, `Pending</th><td class="num"><a href="/console/pending">1<`, body)
			require.Contains(t, body, `<a href="/console/pending?state=inflight">0<`)
			require.Contains(t, body, `<a href="/console/pending?state=retrying">0<`)
			require.Regexp(t, `Failed</th><td class="num"><a href="/console/failed">3<`, body)
			require.Regexp(t, `RuleDeactivated</th><td class="num"><a href="/console/pending\?tag=RuleDeactivated">0</a></td><td class="num"><a href="/console/failed\?tag=RuleDeactivated">1<`, body)
			for _, cell := range regexp.MustCompile(`<td class="num">[^\n]*</td>`).FindAllString(strings.Split(body, `id="answers"`)[0], -1) {
				require.Contains(t, cell, "<a href=", "every count is a link: %s", cell)
			}
			require.Contains(t, body, "<svg")
			require.Contains(t, body, "1 in all")
		})

		t.Run("the failed page lists failed rows only, filtered by tag and error text", func(t *testing.T) {
			body := b.send(t, http.MethodGet, "/console/failed", nil, nil, loopback).Body.String()
			require.Contains(t, body, failed.String())
			require.Contains(t, body, other.String())
			require.NotContains(t, body, pending.String())
			body = b.send(t, http.MethodGet, "/console/failed?tag=RuleDeactivated", nil, nil, loopback).Body.String()
			require.Contains(t, body, other.String())
			require.NotContains(t, body, failed.String())
			body = b.send(t, http.MethodGet, "/console/failed?error=answered+500", nil, nil, loopback).Body.String()
			require.Contains(t, body, failed.String())
			require.NotContains(t, body, other.String())
		})

		t.Run("a hostile payload and error render as text", func(t *testing.T) {
			for _, path := range []string{"/console/rows/" + hostile.String(), "/console/failed"} {
				body := b.send(t, http.MethodGet, path, nil, nil, loopback).Body.String()
				require.NotContains(t, body, "<script>alert")
				require.NotContains(t, body, "<img src=x")
				require.Contains(t, body, "&lt;img src=x onerror=alert(1)&gt;")
			}
		})

		t.Run("a row's page shows its story and links its trace", func(t *testing.T) {
			rec := b.send(t, http.MethodGet, "/console/rows/"+failed.String(), nil, nil, loopback)
			require.Equal(t, http.StatusOK, rec.Code)
			body := rec.Body.String()
			require.Contains(t, body, "billing answered 500")
			require.Contains(t, body, `&#34;ruleId&#34;`)
			require.Contains(t, body, `href="https://traces.example/t/4bf92f3577b34da6a3ce929d0e0e4736"`)
			require.Equal(t, http.StatusNotFound, b.send(t, http.MethodGet, "/console/rows/"+uuid.NewString(), nil, nil, loopback).Code)
			require.Equal(t, http.StatusNotFound, b.send(t, http.MethodGet, "/console/rows/nope", nil, nil, loopback).Code)
		})

		t.Run("a POST without the CSRF token changes nothing", func(t *testing.T) {
			form := url.Values{"action": {"requeue"}, "id": {failed.String()}}
			rec := b.send(t, http.MethodPost, "/console/act", form, nil, loopback)
			require.Equal(t, http.StatusForbidden, rec.Code)
			jar := "cookie-value"
			form.Set("csrf", "another-value")
			require.Equal(t, http.StatusForbidden, b.send(t, http.MethodPost, "/console/act", form, &jar, loopback).Code)
			require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND failed_at IS NOT NULL`, failed.String()))
		})

		t.Run("requeue of one row is confirmed with its count, then done", func(t *testing.T) {
			var jar string
			page := b.send(t, http.MethodGet, "/console/rows/"+failed.String(), nil, &jar, loopback).Body.String()
			m := csrfInput.FindStringSubmatch(page)
			require.NotNil(t, m)
			form := url.Values{"csrf": {m[1]}, "action": {"requeue"}, "id": {failed.String(), pending.String()}}
			rec := b.send(t, http.MethodPost, "/console/confirm", form, &jar, loopback)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), "<strong>1</strong> failed row(s)")
			require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND failed_at IS NOT NULL`, failed.String()))
			rec = b.send(t, http.MethodPost, "/console/act", form, &jar, loopback)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), "Requeued 1 row(s).")
			require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND failed_at IS NULL AND attempts = 0`, failed.String()))
		})

		t.Run("delete of all failed rows of a tag touches that tag only", func(t *testing.T) {
			var jar string
			page := b.send(t, http.MethodGet, "/console/failed?tag=RuleDeactivated", nil, &jar, loopback).Body.String()
			m := csrfInput.FindStringSubmatch(page)
			require.NotNil(t, m)
			rec := b.send(t, http.MethodPost, "/console/confirm", url.Values{"csrf": {m[1]}, "action": {"delete"}, "tag": {"RuleDeactivated"}}, &jar, loopback)
			require.Contains(t, rec.Body.String(), "<strong>1</strong> failed row(s) of tag RuleDeactivated")
			confirm := rec.Body.String()
			require.Contains(t, confirm, other.String())
			form := url.Values{"csrf": {m[1]}, "action": {"delete"}, "id": {other.String()}}
			rec = b.send(t, http.MethodPost, "/console/act", form, &jar, loopback)
			require.Contains(t, rec.Body.String(), "Deleted 1 row(s).")
			require.Equal(t, 0, b.db.Count(t, `SELECT count(*) FROM outbox_events WHERE id = $1`, other.String()))
			require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM outbox_events WHERE id = $1`, hostile.String()))
		})

		t.Run("a bad form is a 400 that changes nothing", func(t *testing.T) {
			var jar string
			page := b.send(t, http.MethodGet, "/console/failed", nil, &jar, loopback).Body.String()
			m := csrfInput.FindStringSubmatch(page)
			require.NotNil(t, m)
			for _, form := range []url.Values{
				{"csrf": {m[1]}, "action": {"drop"}, "id": {hostile.String()}},
				{"csrf": {m[1]}, "action": {"delete"}, "id": {"not-a-uuid"}},
				{"csrf": {m[1]}, "action": {"delete"}},
			} {
				require.Equal(t, http.StatusBadRequest, b.send(t, http.MethodPost, "/console/act", form, &jar, loopback).Code)
			}
			require.Equal(t, 1, b.db.Count(t, `SELECT count(*) FROM outbox_events WHERE id = $1`, hostile.String()))
			require.Equal(t, http.StatusBadRequest, b.send(t, http.MethodGet, "/console/failed?after=x", nil, nil, loopback).Code)
		})
	})
}

func TestConsoleFailedPages(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		b := consoleSetup(t, d, true)
		for i := range outboxPageSize + 5 {
			b.insert(t, "RuleActivated", fmt.Sprintf(`{"i":%d}`, i), true, "e")
		}
		seen, pages := b.pageThrough(t, "/console/failed", "")
		require.Equal(t, 2, pages)
		require.Len(t, seen, outboxPageSize+5)
	})
}

// pageThrough follows a list's "next" links from path (under /console/, a list
// page with its query) to the last page and returns the rows it listed and the
// pages it read, failing t when a row is listed twice or, with keep, when a
// next link drops that part of the query.
func (b *consoleBundle) pageThrough(t *testing.T, path, keep string) (map[string]bool, int) {
	t.Helper()
	list, _, _ := strings.Cut(path, "?")
	row := regexp.MustCompile(`href="/console/rows/([0-9a-f-]+)"`)
	next := regexp.MustCompile(`href="` + regexp.QuoteMeta(list) + `\?([^"]+)" rel="next"`)
	seen, pages := map[string]bool{}, 0
	for path != "" {
		body := b.send(t, http.MethodGet, path, nil, nil, loopback).Body.String()
		pages++
		for _, m := range row.FindAllStringSubmatch(body, -1) {
			require.False(t, seen[m[1]], "row listed twice")
			seen[m[1]] = true
		}
		path = ""
		if m := next.FindStringSubmatch(body); m != nil {
			require.Contains(t, m[1], keep, "the next page keeps the filter")
			path = list + "?" + strings.ReplaceAll(m[1], "&amp;", "&")
		}
	}
	return seen, pages
}

func TestConsoleAccess(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("with AUTH_DISABLED a remote caller is refused", func(t *testing.T) {
			b := consoleSetup(t, d, true)
			require.Equal(t, http.StatusForbidden, b.send(t, http.MethodGet, "/console/", nil, nil, "192.0.2.7:5555").Code)
			require.Equal(t, http.StatusOK, b.send(t, http.MethodGet, "/console/", nil, nil, "[::1]:5555").Code)
		})
		t.Run("with authentication on, only an operator credential is admitted", func(t *testing.T) {
			b := consoleSetup(t, d, false)
			id := b.insert(t, "RuleActivated", `{"secret":"payload"}`, true, "e")
			row := "/console/rows/" + id.String()

			rec := b.send(t, http.MethodGet, row, nil, nil, loopback)
			require.Equal(t, http.StatusSeeOther, rec.Code, "no credential: sent to sign in")
			require.Equal(t, "/console/login", rec.Header().Get("Location"))
			require.NotContains(t, rec.Body.String(), "secret")

			var jar string
			page := b.send(t, http.MethodGet, "/console/login", nil, &jar, loopback)
			require.Equal(t, http.StatusOK, page.Code)
			csrf := csrfInput.FindStringSubmatch(page.Body.String())[1]
			act := url.Values{"csrf": {csrf}, "action": {"delete"}, "id": {id.String()}}
			require.Equal(t, http.StatusUnauthorized, b.send(t, http.MethodPost, "/console/act", act, &jar, loopback).Code)

			plain := b.iss.Token(t, authtest.Claims(uuid.NewString()))
			rec = b.send(t, http.MethodPost, "/console/login", url.Values{"csrf": {csrf}, "token": {plain}}, &jar, loopback)
			require.Equal(t, http.StatusUnauthorized, rec.Code, "a token without the operator scope")
			require.Empty(t, rec.Result().Cookies())

			claims := authtest.Claims()
			claims["scope"] = "rules:read " + auth.OperatorScope
			op := b.iss.Token(t, claims)
			require.Equal(t, http.StatusForbidden, b.send(t, http.MethodPost, "/console/login", url.Values{"token": {op}}, &jar, loopback).Code, "login without CSRF")
			rec = b.send(t, http.MethodPost, "/console/login", url.Values{"csrf": {csrf}, "token": {op}}, &jar, loopback)
			require.Equal(t, http.StatusSeeOther, rec.Code, rec.Body.String())
			var session *http.Cookie
			for _, ck := range rec.Result().Cookies() {
				if ck.Name == "console_session" {
					session = ck
				}
			}
			require.NotNil(t, session)
			require.True(t, session.HttpOnly)
			require.Equal(t, http.SameSiteStrictMode, session.SameSite)
			require.WithinDuration(t, time.Now().Add(15*time.Minute), session.Expires, time.Minute)

			withSession := func(value string) int {
				req := httptest.NewRequest(http.MethodGet, row, nil)
				req.RemoteAddr = "192.0.2.7:5555" // not loopback: the credential is what counts
				req.AddCookie(&http.Cookie{Name: "console_session", Value: value})
				rec := httptest.NewRecorder()
				b.e.ServeHTTP(rec, req)
				return rec.Code
			}
			require.Equal(t, http.StatusOK, withSession(session.Value))
			require.Equal(t, http.StatusSeeOther, withSession(session.Value+"x"), "a tampered session")
			require.Equal(t, http.StatusSeeOther, withSession("9999999999.dGVzdA.forged"), "a forged session")

			b.bearer = op
			rec = b.send(t, http.MethodGet, row, nil, nil, "192.0.2.7:5555")
			require.Equal(t, http.StatusOK, rec.Code)
			require.Contains(t, rec.Body.String(), "secret")
			b.bearer = plain
			require.Equal(t, http.StatusSeeOther, b.send(t, http.MethodGet, row, nil, nil, loopback).Code, "a bearer token without the scope")
		})
	})
}

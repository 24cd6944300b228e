package console_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"testing/fstest"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/console"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/authtest"
)

type pinger struct{}

func (pinger) Ping(context.Context) error { return nil }

// bundle is a console with one page and one action, behind authentication,
// served by a real web.Server.
type bundle struct {
	srv    *httptest.Server
	iss    *authtest.Issuer
	client *http.Client
	acted  atomic.Int64
}

// setup serves a console with a home page (GET /console/) and an action
// (POST /console/act) through web.NewServer with cfg.
func setup(t *testing.T, cfg web.Config) *bundle {
	t.Helper()
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	iss := authtest.New(t)
	v, err := auth.NewVerifier(iss.Config(), logger)
	require.NoError(t, err)
	pages := fstest.MapFS{"home.html": {Data: []byte(`{{define "home"}}<p id="home">home</p>{{end}}`)}}
	c, err := console.New(console.Info{Service: "test"}, v, pages, nil)
	require.NoError(t, err)
	e := web.New(logger, pinger{})
	b := &bundle{iss: iss, client: &http.Client{
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	g := c.Group(e)
	g.GET("/", func(ec echo.Context) error { return c.Render(ec, http.StatusOK, "home", "Home", nil) })
	g.POST("/act", func(ec echo.Context) error {
		b.acted.Add(1)
		return ec.String(http.StatusOK, "acted on "+fmt.Sprint(len(ec.Request().PostForm["id"]))+" ids\n")
	})
	b.srv = httptest.NewServer(web.NewServer(cfg, e, logger))
	t.Cleanup(b.srv.Close)
	return b
}

// operator is a token with the console's scope.
func (b *bundle) operator(t *testing.T) string {
	claims := authtest.Claims()
	claims["scope"] = auth.OperatorScope
	return b.iss.Token(t, claims)
}

// reply is what a test reads of a response: its body is read and closed.
type reply struct {
	StatusCode int
	Header     http.Header
	cookies    []*http.Cookie
}

func (r reply) Cookies() []*http.Cookie { return r.cookies }

// send POSTs form (urlencoded) with the CSRF cookie and field "tok" and the
// given cookies, or GETs when form is nil.
func (b *bundle) send(t *testing.T, path string, form url.Values, cookies ...*http.Cookie) reply {
	t.Helper()
	method, body := http.MethodGet, io.Reader(nil)
	if form != nil {
		form.Set("csrf", "tok")
		method, body = http.MethodPost, strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.srv.URL+path, body)
	require.NoError(t, err)
	if form != nil {
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationForm)
	}
	req.AddCookie(&http.Cookie{Name: "console_csrf", Value: "tok"})
	for _, ck := range cookies {
		req.AddCookie(ck)
	}
	resp, err := b.client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return reply{StatusCode: resp.StatusCode, Header: resp.Header, cookies: resp.Cookies()}
}

func cookie(resp interface{ Cookies() []*http.Cookie }, name string) *http.Cookie {
	for _, ck := range resp.Cookies() {
		if ck.Name == name {
			return ck
		}
	}
	return nil
}

// login signs in with an operator token and returns the session cookie.
func (b *bundle) login(t *testing.T) *http.Cookie {
	t.Helper()
	resp := b.send(t, "/console/login", url.Values{"token": {b.operator(t)}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	session := cookie(resp, "console_session")
	require.NotNil(t, session)
	return session
}

func TestLogoutRevokesTheSession(t *testing.T) {
	t.Parallel()
	b := setup(t, web.Config{})
	session := b.login(t)
	copied := *session // what a thief (or a shared machine's history) kept
	require.Equal(t, http.StatusOK, b.send(t, "/console/", nil, session).StatusCode)

	resp := b.send(t, "/console/logout", url.Values{}, session)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/console/login", resp.Header.Get("Location"))
	cleared := cookie(resp, "console_session")
	require.NotNil(t, cleared)
	require.Empty(t, cleared.Value)

	t.Run("a copy of the cookie gets the sign-in page", func(t *testing.T) {
		resp := b.send(t, "/console/", nil, &copied)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		require.Equal(t, "/console/login", resp.Header.Get("Location"))
	})
	t.Run("a copy of the cookie cannot act: 401", func(t *testing.T) {
		require.Equal(t, http.StatusUnauthorized, b.send(t, "/console/act", url.Values{"id": {"1"}}, &copied).StatusCode)
		require.Zero(t, b.acted.Load())
	})
	t.Run("another session of the same operator stays open", func(t *testing.T) {
		other := b.login(t)
		require.Equal(t, http.StatusOK, b.send(t, "/console/", nil, other).StatusCode)
		require.Equal(t, http.StatusSeeOther, b.send(t, "/console/", nil, &copied).StatusCode, "still revoked")
	})
}

func TestSecureCookies(t *testing.T) {
	t.Parallel()
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("with CONSOLE_SECURE_COOKIES=%t the cookies are Secure: %t", on, on), func(t *testing.T) {
			t.Parallel()
			b := setup(t, web.Config{SecureCookies: on})
			// Without a CSRF cookie, so that the page sets one.
			req, err := http.NewRequest(http.MethodGet, b.srv.URL+"/console/login", nil)
			require.NoError(t, err)
			resp, err := b.client.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			csrf := cookie(resp, "console_csrf")
			require.NotNil(t, csrf)
			require.Equal(t, on, csrf.Secure, "console_csrf")
			session := b.login(t)
			require.Equal(t, on, session.Secure, "console_session")
			out := cookie(b.send(t, "/console/logout", url.Values{}, session), "console_session")
			require.NotNil(t, out)
			require.Equal(t, on, out.Secure, "the cleared console_session")
		})
	}
}

// TestFormBodies: the console reads only urlencoded forms, at most
// MaxLoginForm bytes at sign-in (before the caller is known) and MaxForm
// after; anything else is refused before it is read.
func TestFormBodies(t *testing.T) {
	t.Parallel()
	b := setup(t, web.Config{})
	session := b.login(t)
	headerOnly := func(t *testing.T, path, contentType string, length int, cookies string) int {
		conn, err := net.Dial("tcp", strings.TrimPrefix(b.srv.URL, "http://"))
		require.NoError(t, err)
		defer conn.Close()
		require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
		_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\nCookie: console_csrf=tok%s\r\n\r\n", path, contentType, length, cookies)
		require.NoError(t, err)
		resp, err := http.ReadResponse(bufioReader(conn), nil)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	withSession := "; console_session=" + session.Value
	var postAs func(path, contentType, body string, cookies ...*http.Cookie) int
	// Lengths over net/http's 256 KiB, up to which it would discard an unread
	// body before answering: the answer comes with no byte of the body sent.
	for name, tc := range map[string]struct {
		path, contentType, cookies string
		length, want               int
	}{
		"a multipart sign-in is 415":         {"/console/login", "multipart/form-data; boundary=x", "", 50 << 20, http.StatusUnsupportedMediaType},
		"a multipart action is 415":          {"/console/act", "multipart/form-data; boundary=x", withSession, 50 << 20, http.StatusUnsupportedMediaType},
		"a sign-in over MaxLoginForm is 413": {"/console/login", echo.MIMEApplicationForm, "", 1 << 20, http.StatusRequestEntityTooLarge},
		"an action over MaxForm is 413":      {"/console/act", echo.MIMEApplicationForm, withSession, 1 << 20, http.StatusRequestEntityTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, tc.want, headerOnly(t, tc.path, tc.contentType, tc.length, tc.cookies))
		})
	}

	post := func(path, body string, cookies ...*http.Cookie) int {
		return postAs(path, echo.MIMEApplicationForm, body, cookies...)
	}
	postAs = func(path, contentType, body string, cookies ...*http.Cookie) int {
		req, err := http.NewRequest(http.MethodPost, b.srv.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set(echo.HeaderContentType, contentType)
		req.AddCookie(&http.Cookie{Name: "console_csrf", Value: "tok"})
		for _, ck := range cookies {
			req.AddCookie(ck)
		}
		resp, err := b.client.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	t.Run("a sign-in of another type is 415", func(t *testing.T) {
		require.Equal(t, http.StatusUnsupportedMediaType, postAs("/console/login", "text/plain", "csrf=tok&token=x"))
	})
	t.Run("an action in JSON is 415", func(t *testing.T) {
		require.Equal(t, http.StatusUnsupportedMediaType, postAs("/console/act", "application/json", `{"csrf":"tok"}`, session))
		require.Zero(t, b.acted.Load())
	})
	t.Run("a stranger's action is 401 whatever its body", func(t *testing.T) {
		require.Equal(t, http.StatusUnauthorized, postAs("/console/act", "text/plain", "csrf=tok"))
		require.Zero(t, b.acted.Load())
	})
	t.Run("a sign-in just over MaxLoginForm is 413", func(t *testing.T) {
		body := "csrf=tok&token=" + strings.Repeat("a", console.MaxLoginForm)
		require.Equal(t, http.StatusRequestEntityTooLarge, post("/console/login", body))
	})
	t.Run("an action on 1,000 ids fits MaxForm", func(t *testing.T) {
		form := url.Values{"csrf": {"tok"}}
		for range 1000 {
			form.Add("id", "0190d8f4-7b1c-7cc2-8a4e-6a1e0f6b2c3d")
		}
		require.Equal(t, http.StatusOK, post("/console/act", form.Encode(), session))
		require.Equal(t, int64(1), b.acted.Load())
	})
	t.Run("an action just over MaxForm is 413", func(t *testing.T) {
		body := "csrf=tok&id=" + strings.Repeat("a", console.MaxForm)
		require.Equal(t, http.StatusRequestEntityTooLarge, post("/console/act", body, session))
		require.Equal(t, int64(1), b.acted.Load())
	})
}

func bufioReader(r io.Reader) *bufio.Reader { return bufio.NewReader(r) }

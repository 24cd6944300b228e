// Package console is the shared part of each service's operator console under
// /console/: the access rule, the security headers, the CSRF check of every
// state-changing request, the page layout, and the pages of an outbox table
// (Outbox), the same for labeling's outbox and billing's. Each slice
// (labeling/console.go, billing/console.go) mounts them and adds its own
// pages; nothing here is on a hot path.
package console

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"mime"
	"net"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/web"
)

// Prefix is the path every console page lives under.
const Prefix = "/console/"

// csrfCookie holds the double-submit token; csrfField is the form field that
// must repeat it on every POST.
const (
	csrfCookie = "console_csrf"
	csrfField  = "csrf"
)

//go:embed templates/*.html
var layoutFS embed.FS

// Info is what every page shows in its header: the service, its version,
// transport and database kind, and links to the other service's console.
type Info struct {
	Service   string
	Version   string
	Transport string
	Database  string
	Links     []Link
	// Ready is what /readyz checks (a ping of the database); nil shows nothing.
	Ready func(context.Context) error
}

// Link is a named link in the header.
type Link struct {
	Name string
	URL  string
}

// Console renders a slice's pages inside the shared layout and guards them.
type Console struct {
	info     Info
	verifier *auth.Verifier // nil: AUTH_DISABLED=true, open on loopback only
	sessions *sessions
	tmpl     *template.Template
}

// New returns the console of a service whose own page templates are pages
// (each file defines a template named as Render is asked for; nil: none, as
// for a service that shows only its outbox's, see Outbox). verifier is the
// service's token verifier, nil when AUTH_DISABLED=true: then the console
// admits requests from loopback addresses only; otherwise it admits a browser
// session made at /console/login from a token with auth.OperatorScope, or a
// request bearing such a token (see docs/authentication.md).
func New(info Info, verifier *auth.Verifier, pages fs.FS, funcs template.FuncMap) (*Console, error) {
	base := template.New("layout.html").Funcs(template.FuncMap{"count": count, "time": FormatTime, "age": age}).Funcs(funcs)
	_, err := base.ParseFS(layoutFS, "templates/*.html")
	if err != nil {
		return nil, err
	}
	t := base
	if pages != nil {
		if t, err = base.ParseFS(pages, "*.html"); err != nil {
			return nil, err
		}
	}
	sess, err := newSessions(MaxRevoked)
	if err != nil {
		return nil, err
	}
	return &Console{info: info, verifier: verifier, sessions: sess, tmpl: t}, nil
}

// Group returns the /console group of e behind Guard, with the login and
// logout routes and the stylesheet.
func (c *Console) Group(e *echo.Echo) *echo.Group {
	g := e.Group("/console", c.Guard)
	g.GET("", func(ec echo.Context) error { return ec.Redirect(http.StatusMovedPermanently, Prefix) })
	g.GET("/style.css", Style)
	g.GET("/login", c.loginPage)
	g.POST("/login", c.login)
	g.POST("/logout", c.logout)
	return g
}

// MaxLoginForm bounds the body of a sign-in, the one POST a caller makes
// before it is known: the CSRF field and an operator token (a JWT, rarely
// over 2 KiB). MaxForm bounds every other console POST: the largest form the
// console writes is the confirmation of an action on 1,000 rows (labeling's
// maxAction), 1,000 times "id=<UUID>&" (40 bytes) besides the CSRF field.
const (
	MaxLoginForm = 8 << 10
	MaxForm      = 48 << 10
)

// Guard sets the security headers on every console response, refuses a caller
// the access rule does not admit (403), and then checks a POST's body before
// anything reads it: a body that is not application/x-www-form-urlencoded is
// a 415, one over MaxLoginForm (a sign-in) or MaxForm (any other) a 413, both
// unread when the Content-Length says so; the form is then parsed within that
// bound (a body without a length that runs over is a 413 too), in memory
// only; and a POST whose CSRF field does not repeat its cookie is a 403,
// before the handler runs.
func (c *Console) Guard(next echo.HandlerFunc) echo.HandlerFunc {
	return func(ec echo.Context) error {
		h := ec.Response().Header()
		// No script, no style, no frame from anywhere: the pages need none.
		h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// Pages show payloads and errors: never kept by a browser or a proxy.
		h.Set("Cache-Control", "no-store")
		path := ec.Request().URL.Path
		public := path == "/console/login" || path == "/console/style.css"
		switch {
		case c.verifier == nil && !loopback(ec.Request()):
			return ec.String(http.StatusForbidden, "console: forbidden (with AUTH_DISABLED=true the console is open on loopback only; see docs/authentication.md)\n")
		case c.verifier != nil && !public && !c.signedIn(ec):
			if ec.Request().Method == http.MethodGet {
				return ec.Redirect(http.StatusSeeOther, "/console/login")
			}
			return ec.String(http.StatusUnauthorized, "console: sign in with an operator token at /console/login\n")
		}
		if ec.Request().Method != http.MethodGet && ec.Request().Method != http.MethodHead {
			if ec.Request().Method != http.MethodPost {
				return ec.String(http.StatusMethodNotAllowed, "console: method not allowed\n")
			}
			if status, msg := readForm(ec, public); status != 0 {
				return ec.String(status, msg)
			}
			if !validCSRF(ec.Request()) {
				return ec.String(http.StatusForbidden, "console: missing or wrong CSRF token; reload the page and try again\n")
			}
		}
		return next(ec)
	}
}

// loopback reports whether the request came from a loopback address: the
// rule with AUTH_DISABLED=true.
func loopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// readForm parses a console POST's form within its bound (see Guard),
// returning the status and text of a refusal, or 0. web.Bodies has already
// refused a multipart body on every route; this is the console's tighter rule.
func readForm(ec echo.Context, login bool) (int, string) {
	r := ec.Request()
	limit := int64(MaxForm)
	if login {
		limit = MaxLoginForm
	}
	if ct := r.Header.Get(echo.HeaderContentType); r.ContentLength != 0 || ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != echo.MIMEApplicationForm {
			return http.StatusUnsupportedMediaType, "console: a form must be sent as " + echo.MIMEApplicationForm + "\n"
		}
	}
	tooLarge := fmt.Sprintf("console: a form is at most %d bytes\n", limit)
	if err := web.LimitBody(ec, limit); err != nil {
		return http.StatusRequestEntityTooLarge, tooLarge
	}
	if err := r.ParseForm(); err != nil {
		var over *http.MaxBytesError
		if errors.As(err, &over) {
			return http.StatusRequestEntityTooLarge, tooLarge
		}
		return http.StatusBadRequest, "console: the form could not be read\n"
	}
	return 0, ""
}

// validCSRF is the double-submit check: the form's field equals the cookie,
// which only a page of this origin could read into the form (SameSite=Strict
// keeps other sites' requests from carrying the cookie at all).
func validCSRF(r *http.Request) bool {
	ck, err := r.Cookie(csrfCookie)
	if err != nil || ck.Value == "" {
		return false
	}
	got := r.PostFormValue(csrfField)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(ck.Value)) == 1
}

// token returns the request's CSRF token, setting a fresh cookie when it has none.
func token(ec echo.Context) string {
	if ck, err := ec.Request().Cookie(csrfCookie); err == nil && ck.Value != "" {
		return ck.Value
	}
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	v := base64.RawURLEncoding.EncodeToString(b)
	ec.SetCookie(&http.Cookie{
		Name: csrfCookie, Value: v, Path: "/console", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: web.Secure(ec.Request()),
	})
	return v
}

// Page is what the layout receives: the shared header, the page's title, the
// CSRF token for its forms, and the page's own data.
type Page struct {
	Info  Info
	Title string
	CSRF  string
	Auth  bool // authentication is on: the header offers a sign-out
	// Ready is what /readyz would answer now: "ready (200)" or "not ready (503)".
	Ready string
	Data  any
}

// Render writes the page named name (a file of the slice's templates, which
// defines "content") inside the layout, with status.
func (c *Console) Render(ec echo.Context, status int, name, title string, data any) error {
	t, err := c.tmpl.Clone()
	if err != nil {
		return err
	}
	if _, err := t.New("content-ref").Parse(`{{template "` + name + `" .}}`); err != nil {
		return err
	}
	page := Page{Info: c.info, Title: title, CSRF: token(ec), Auth: c.verifier != nil, Data: data} // sets its cookie before the header is written
	if c.info.Ready != nil {
		ctx, cancel := context.WithTimeout(ec.Request().Context(), 2*time.Second) // /readyz's own bound
		page.Ready = "ready (200)"
		if c.info.Ready(ctx) != nil {
			page.Ready = "not ready: database unavailable (503)"
		}
		cancel()
	}
	var b bytes.Buffer
	if err := t.ExecuteTemplate(&b, "layout.html", page); err != nil {
		return err
	}
	return ec.HTMLBlob(status, b.Bytes())
}

// FormatTime formats epoch milliseconds as the pages show a time: RFC 3339
// UTC with milliseconds, as the API and the `outbox` commands print it.
func FormatTime(ms int64) string {
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// age is how long ago ms (epoch milliseconds) was, to the second.
func age(ms int64) string { return time.Since(time.UnixMilli(ms)).Truncate(time.Second).String() }

// Style serves the console's one stylesheet.
func Style(ec echo.Context) error {
	ec.Response().Header().Set("Cache-Control", "max-age=300")
	return ec.Blob(http.StatusOK, "text/css; charset=utf-8", styleCSS)
}

//go:embed style.css
var styleCSS []byte

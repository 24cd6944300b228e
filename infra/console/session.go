package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/acme/outboxpair/infra/auth"
)

// SessionTTL is how long a console session lasts (never past its token's expiry).
const SessionTTL = 15 * time.Minute

const sessionCookie = "console_session"

// sessions signs session cookies with a key made at start and kept in memory
// only: a restart (or another replica) does not know it, so its operators
// sign in again. That is the price of having no session store and no shared
// secret setting.
type sessions struct{ key []byte }

func newSessions() (sessions, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return sessions{}, err
	}
	return sessions{key: k}, nil
}

func (s sessions) mac(payload string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// issue is a cookie value naming subject until exp: "exp.subject.mac".
func (s sessions) issue(subject string, exp time.Time) string {
	p := strconv.FormatInt(exp.Unix(), 10) + "." + base64.RawURLEncoding.EncodeToString([]byte(subject))
	return p + "." + s.mac(p)
}

// valid reports whether v is a session this process issued that has not expired.
func (s sessions) valid(v string, now time.Time) bool {
	i := strings.LastIndexByte(v, '.')
	if i < 0 || !hmac.Equal([]byte(v[i+1:]), []byte(s.mac(v[:i]))) {
		return false
	}
	exp, _, _ := strings.Cut(v[:i], ".")
	n, err := strconv.ParseInt(exp, 10, 64)
	return err == nil && now.Unix() < n
}

// signedIn reports whether the request carries a valid session cookie or a
// bearer token with the operator scope.
func (c *Console) signedIn(ec echo.Context) bool {
	if ck, err := ec.Request().Cookie(sessionCookie); err == nil && c.sessions.valid(ck.Value, time.Now()) {
		return true
	}
	if raw, ok := strings.CutPrefix(ec.Request().Header.Get(echo.HeaderAuthorization), "Bearer "); ok {
		_, err := c.operator(ec.Request().Context(), raw)
		return err == nil
	}
	return false
}

var errNotOperator = errors.New("the token has no " + auth.OperatorScope + " scope")

// operator verifies raw and requires the operator scope.
func (c *Console) operator(ctx context.Context, raw string) (*auth.Claims, error) {
	claims, err := c.verifier.Verify(ctx, strings.TrimSpace(raw))
	if err != nil {
		return nil, err
	}
	if !claims.HasScope(auth.OperatorScope) {
		return nil, errNotOperator
	}
	return claims, nil
}

// loginData is the sign-in page.
type loginData struct{ Problem string }

func (c *Console) loginPage(ec echo.Context) error {
	if c.verifier == nil {
		return ec.Redirect(http.StatusSeeOther, "/console/")
	}
	return c.Render(ec, http.StatusOK, "login", "Sign in", loginData{})
}

// login exchanges an operator token (the form's token field) for a session
// cookie: HttpOnly, SameSite=Strict, Secure over TLS, for SessionTTL or until
// the token expires, whichever is first.
func (c *Console) login(ec echo.Context) error {
	if c.verifier == nil {
		return ec.Redirect(http.StatusSeeOther, "/console/")
	}
	claims, err := c.operator(ec.Request().Context(), ec.FormValue("token"))
	if errors.Is(err, auth.ErrUnavailable) {
		return c.Render(ec, http.StatusServiceUnavailable, "login", "Sign in", loginData{Problem: "The token issuer's keys could not be fetched; try again."})
	}
	if err != nil {
		// Which check failed is not said: the page is not an oracle for tokens.
		return c.Render(ec, http.StatusUnauthorized, "login", "Sign in", loginData{Problem: "That is not a valid operator token (it needs the " + auth.OperatorScope + " scope)."})
	}
	exp := time.Now().Add(SessionTTL)
	if claims.ExpiresAt != nil && claims.ExpiresAt.Before(exp) {
		exp = claims.ExpiresAt.Time
	}
	ec.SetCookie(&http.Cookie{
		Name: sessionCookie, Value: c.sessions.issue(claims.Subject, exp), Path: "/console",
		Expires: exp, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: ec.Request().TLS != nil,
	})
	return ec.Redirect(http.StatusSeeOther, "/console/")
}

// logout clears the session cookie (the session itself lasts until it expires;
// the cookie is the only copy the browser had).
func (c *Console) logout(ec echo.Context) error {
	ec.SetCookie(&http.Cookie{Name: sessionCookie, Value: "", Path: "/console", MaxAge: -1, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return ec.Redirect(http.StatusSeeOther, "/console/login")
}

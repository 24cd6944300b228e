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
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/web"
)

// SessionTTL is how long a console session lasts (never past its token's expiry).
const SessionTTL = 15 * time.Minute

// MaxRevoked bounds the sessions signed out and not yet expired that a process
// remembers (about 100 bytes each). A logout that finds the list full, once
// the expired ones are dropped, replaces the signing key instead: every
// session of this process ends at once, the revoked ones with the rest, and
// its operators sign in again. So a full list costs a sign-in, never lets a
// revoked session back in.
const MaxRevoked = 10_000

const sessionCookie = "console_session"

// sessions signs session cookies with a key made at start and kept in memory
// only: a restart (or another replica) does not know it, so its operators
// sign in again. That is the price of having no session store and no shared
// secret setting. It also makes revocation local and complete: a session
// opens only the process that issued it, so the list of the sessions signed
// out there (revoked, each until its own expiry) is the only one it needs.
type sessions struct {
	mu      sync.Mutex
	key     []byte
	revoked map[string]int64 // session id -> its expiry, Unix seconds
	max     int              // MaxRevoked, or less in a test
}

func newSessions(maxRevoked int) (*sessions, error) {
	s := &sessions{revoked: map[string]int64{}, max: maxRevoked}
	if err := s.rekey(); err != nil {
		return nil, err
	}
	return s, nil
}

// rekey replaces the key, ending every session issued so far; s.mu is held
// (or s is new).
func (s *sessions) rekey() error {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return err
	}
	s.key = k
	clear(s.revoked) // signed by the old key, they no longer verify anyway
	return nil
}

// mac signs payload with the current key; s.mu is held.
func (s *sessions) mac(payload string) string {
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// issue is a cookie value naming subject until exp, under a random session id
// (what a logout revokes): "exp.id.subject.mac".
func (s *sessions) issue(subject string, exp time.Time) string {
	id := make([]byte, 16)
	_, _ = rand.Read(id) // never fails (crypto/rand)
	p := strconv.FormatInt(exp.Unix(), 10) + "." + base64.RawURLEncoding.EncodeToString(id) + "." +
		base64.RawURLEncoding.EncodeToString([]byte(subject))
	s.mu.Lock()
	defer s.mu.Unlock()
	return p + "." + s.mac(p)
}

// live returns the id and expiry of v when v is a session the current key
// signed that has not expired and was not revoked; s.mu is held, so no
// logout or new key comes between the check of the signature and the list's.
func (s *sessions) live(v string, now time.Time) (id string, exp int64, ok bool) {
	i := strings.LastIndexByte(v, '.')
	if i < 0 || !hmac.Equal([]byte(v[i+1:]), []byte(s.mac(v[:i]))) {
		return "", 0, false
	}
	parts := strings.Split(v[:i], ".")
	if len(parts) != 3 {
		return "", 0, false
	}
	exp, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || now.Unix() >= exp {
		return "", 0, false
	}
	if _, revoked := s.revoked[parts[1]]; revoked {
		return "", 0, false
	}
	return parts[1], exp, true
}

// valid reports whether v is a session this process issued that has not
// expired and was not revoked.
func (s *sessions) valid(v string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, _, ok := s.live(v, now)
	return ok
}

// revoke ends the session v for the rest of its life: it is kept in the list
// until its own expiry, when it would be refused anyway. When the list is
// full of unexpired sessions, the key is replaced (see MaxRevoked). A value
// that is not a live session changes nothing.
func (s *sessions) revoke(v string, now time.Time) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, exp, ok := s.live(v, now)
	if !ok {
		return nil
	}
	// Each entry leaves at its session's own expiry, when the session would be
	// refused anyway (a scan of at most max entries, on a logout only).
	for rid, rexp := range s.revoked {
		if now.Unix() >= rexp {
			delete(s.revoked, rid)
		}
	}
	if len(s.revoked) >= s.max {
		return s.rekey()
	}
	s.revoked[id] = exp
	return nil
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
// cookie: HttpOnly, SameSite=Strict, Secure over HTTPS (web.Secure), for SessionTTL or until
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
		Expires: exp, HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: web.Secure(ec.Request()),
	})
	return ec.Redirect(http.StatusSeeOther, "/console/")
}

// logout revokes the request's session for the rest of its life, so a copy
// of its cookie no longer opens the console, and clears the cookie.
func (c *Console) logout(ec echo.Context) error {
	if ck, err := ec.Request().Cookie(sessionCookie); err == nil {
		if err := c.sessions.revoke(ck.Value, time.Now()); err != nil {
			return err
		}
	}
	ec.SetCookie(&http.Cookie{
		Name: sessionCookie, Value: "", Path: "/console", MaxAge: -1, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: web.Secure(ec.Request()),
	})
	return ec.Redirect(http.StatusSeeOther, "/console/login")
}

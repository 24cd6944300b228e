package auth

import (
	"errors"
	"log/slog"
	"strings"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/web"
)

// realm names the protected resource in WWW-Authenticate.
const realm = `Bearer realm="outboxpair"`

// claimsKey is where Guard.Org leaves the verified claims in the echo context.
const claimsKey = "auth.claims"

// Guard admits requests to org-scoped routes. Its zero value is not usable: get
// one from NewGuard, or Disabled.
type Guard struct {
	verifier *Verifier // nil when disabled
	logger   *slog.Logger
}

// NewGuard returns a guard that verifies every request with v.
func NewGuard(v *Verifier, logger *slog.Logger) *Guard {
	return &Guard{verifier: v, logger: logger}
}

// Disabled returns a guard that admits every request: AUTH_DISABLED=true, and
// handler tests that are not about authentication.
func Disabled() *Guard { return &Guard{} }

// Enabled reports whether the guard checks tokens.
func (g *Guard) Enabled() bool { return g.verifier != nil }

// Org returns the middleware of a route whose path parameter param names the org:
// it admits the request only with a valid bearer token whose org_ids claim holds
// that org. Otherwise it answers before the handler runs, so nothing is read or
// written:
//
//   - no credentials, or not a Bearer one: 401 with WWW-Authenticate: Bearer;
//   - a token that does not verify: 401, WWW-Authenticate with error="invalid_token";
//   - the issuer's keys unreachable for a key id not cached: 503;
//   - param not a UUID: 400, as the handler would answer;
//   - a valid token without that org (org_ids missing included): notFound, which
//     should be the route's answer for a thing that does not exist, so that a
//     caller cannot tell another org's data from none. Nil means a plain 404.
func (g *Guard) Org(param string, notFound error) echo.MiddlewareFunc {
	if notFound == nil {
		notFound = fault.Errorf(fault.NotFound, "not found")
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		if g.verifier == nil {
			return next
		}
		return func(c echo.Context) error {
			claims, err := g.authenticate(c)
			if err != nil {
				return err
			}
			raw := c.Param(param)
			org, err := uuid.Parse(raw)
			if err != nil || len(raw) != 36 {
				return fault.Errorf(fault.Invalid, "%s must be a UUID, got %q", param, web.Clip(raw, web.MaxEcho))
			}
			if org == uuid.Nil { // no id is the nil UUID (api/openapi.yaml), whoever asks
				return fault.Errorf(fault.Invalid, "%s must not be the nil UUID", param)
			}
			if !claims.Has(org) {
				refused.WithLabelValues(reasonOrg).Inc()
				return notFound
			}
			c.Set(claimsKey, claims)
			return next(c)
		}
	}
}

// Has reports whether the claims list org in org_ids.
func (c *Claims) Has(org uuid.UUID) bool {
	for _, s := range c.OrgIDs {
		if id, err := uuid.Parse(s); err == nil && id == org {
			return true
		}
	}
	return false
}

// ClaimsOf returns the claims Org verified for this request; nil when the guard is
// disabled.
func ClaimsOf(c echo.Context) *Claims {
	claims, _ := c.Get(claimsKey).(*Claims)
	return claims
}

func (g *Guard) authenticate(c echo.Context) (*Claims, error) {
	h := c.Response().Header()
	values := c.Request().Header.Values(echo.HeaderAuthorization)
	var token string
	if len(values) == 1 {
		scheme, rest, _ := strings.Cut(values[0], " ")
		if strings.EqualFold(scheme, "Bearer") {
			token = strings.TrimSpace(rest)
		}
	}
	if token == "" {
		// RFC 6750 section 3.1: a request without credentials gets no error code.
		h.Set(echo.HeaderWWWAuthenticate, realm)
		refused.WithLabelValues(reasonMissing).Inc()
		return nil, fault.Errorf(fault.Unauthorized, "a Bearer token is required")
	}
	claims, err := g.verifier.Verify(c.Request().Context(), token)
	var invalid *InvalidTokenError
	switch {
	case err == nil:
		return claims, nil
	case errors.As(err, &invalid):
		msg, reason := "the token is not valid", reasonInvalid
		if errors.Is(err, jwt.ErrTokenExpired) {
			msg, reason = "the token has expired", reasonExpired
		}
		refused.WithLabelValues(reason).Inc()
		h.Set(echo.HeaderWWWAuthenticate, realm+`, error="invalid_token", error_description="`+msg+`"`)
		g.logger.Debug("auth: token refused", "route", c.Path(), "reason", invalid.Err.Error())
		return nil, fault.Errorf(fault.Unauthorized, "%s", msg)
	default:
		h.Set("Retry-After", "10")
		refused.WithLabelValues(reasonUnavailable).Inc()
		return nil, fault.Wrap(fault.Unavailable, err, "the token issuer's keys are unavailable")
	}
}

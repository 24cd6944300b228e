package labeling

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/apitest"
	"github.com/acme/outboxpair/internal/testsupport/authtest"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// doAs sends one request with the given Authorization header ("" for none).
func (b *testBundle) doAs(t testing.TB, authorization, method, path, body string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	}
	if authorization != "" {
		req.Header.Set(echo.HeaderAuthorization, authorization)
	}
	return apitest.Do(t, b.e, req)
}

// state is what a refused request must leave alone.
type state struct{ rules, active, events int }

func (b *testBundle) state(t testing.TB) state {
	t.Helper()
	return state{
		rules:  b.count(t, `SELECT count(*) FROM labeling_rules`),
		active: b.count(t, `SELECT count(*) FROM labeling_rules WHERE active`),
		events: b.count(t, `SELECT count(*) FROM outbox_events`),
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		b := setup(t, d)
		iss := b.iss

		// One inactive rule of b.org; every attack tries to create another rule there
		// and to activate this one.
		existing := uuid.NewString()
		b.create(t, b.org, existing)
		before := b.state(t)
		require.Equal(t, state{rules: 1, active: 0, events: 0}, before)

		claims := func(edit func(jwt.MapClaims)) jwt.MapClaims {
			c := authtest.Claims(b.org)
			edit(c)
			return c
		}
		otherKey, err := rsa.GenerateKey(rand.Reader, 2048)
		require.NoError(t, err)
		pubDER, err := x509.MarshalPKIXPublicKey(&iss.RSA.PublicKey)
		require.NoError(t, err)

		refused := []struct {
			name, authorization string
			status              int
		}{
			{"no token", "", http.StatusUnauthorized},
			{"another scheme", "Basic " + iss.For(t, b.org), http.StatusUnauthorized},
			{"Bearer and nothing", "Bearer", http.StatusUnauthorized},
			{"garbage", "Bearer garbage", http.StatusUnauthorized},
			{"expired", "Bearer " + iss.Token(t, claims(func(c jwt.MapClaims) { c["exp"] = time.Now().Add(-time.Hour).Unix() })), http.StatusUnauthorized},
			{"not yet valid", "Bearer " + iss.Token(t, claims(func(c jwt.MapClaims) { c["nbf"] = time.Now().Add(time.Hour).Unix() })), http.StatusUnauthorized},
			{"wrong issuer", "Bearer " + iss.Token(t, claims(func(c jwt.MapClaims) { c["iss"] = "https://evil.test" })), http.StatusUnauthorized},
			{"wrong audience", "Bearer " + iss.Token(t, claims(func(c jwt.MapClaims) { c["aud"] = "someone-else" })), http.StatusUnauthorized},
			{"bad signature", "Bearer " + iss.Sign(t, jwt.SigningMethodRS256, authtest.RSAKey, otherKey, authtest.Claims(b.org)), http.StatusUnauthorized},
			{"alg none", "Bearer " + iss.Sign(t, jwt.SigningMethodNone, authtest.RSAKey, jwt.UnsafeAllowNoneSignatureType, authtest.Claims(b.org)), http.StatusUnauthorized},
			{"HS256 with the public key", "Bearer " + iss.Sign(t, jwt.SigningMethodHS256, authtest.RSAKey, pubDER, authtest.Claims(b.org)), http.StatusUnauthorized},
			{"unknown key id", "Bearer " + iss.Sign(t, jwt.SigningMethodRS256, "nobody", iss.RSA, authtest.Claims(b.org)), http.StatusUnauthorized},
			{"another org's token", "Bearer " + iss.For(t, uuid.NewString()), http.StatusNotFound},
			{"no org_ids", "Bearer " + iss.Token(t, claims(func(c jwt.MapClaims) { delete(c, "org_ids") })), http.StatusNotFound},
		}
		for _, a := range refused {
			t.Run(a.name+" is refused and writes nothing", func(t *testing.T) {
				newRule := createJSON(t, uuid.NewString(), "n", "p", "l")
				for _, req := range []struct{ method, path, body string }{
					{http.MethodPost, rulesPath(b.org), newRule},
					{http.MethodPost, rulePath(b.org, existing) + "/activate", ""},
					{http.MethodPost, rulePath(b.org, existing) + "/deactivate", ""},
					{http.MethodGet, rulePath(b.org, existing), ""},
					{http.MethodGet, rulesPath(b.org), ""},
				} {
					rec := b.doAs(t, a.authorization, req.method, req.path, req.body)
					require.Equal(t, a.status, rec.Code, "%s %s: %s", req.method, req.path, rec.Body.String())
					if a.status == http.StatusUnauthorized {
						require.True(t, strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer"), rec.Header())
						requireError(t, rec, http.StatusUnauthorized, "unauthorized")
					} else {
						requireError(t, rec, http.StatusNotFound, "not_found")
					}
					require.NotContains(t, rec.Body.String(), existing, "the answer names nothing")
				}
				require.Equal(t, before, b.state(t), "nothing written")
			})
		}

		t.Run("another org's rule answers exactly as a rule that does not exist", func(t *testing.T) {
			foreign := "Bearer " + iss.For(t, uuid.NewString())
			own := "Bearer " + iss.For(t, b.org)
			hidden := b.doAs(t, foreign, http.MethodGet, rulePath(b.org, existing), "")
			absent := b.doAs(t, own, http.MethodGet, rulePath(b.org, uuid.NewString()), "")
			require.Equal(t, absent.Code, hidden.Code)
			require.Equal(t, absent.Body.String(), hidden.Body.String())
			hidden = b.doAs(t, foreign, http.MethodPost, rulePath(b.org, existing)+"/activate", "")
			absent = b.doAs(t, own, http.MethodPost, rulePath(b.org, uuid.NewString())+"/activate", "")
			require.Equal(t, absent.Code, hidden.Code)
			require.Equal(t, absent.Body.String(), hidden.Body.String())
			require.Equal(t, before, b.state(t))
		})

		t.Run("a valid token for the org, RS256 or ES256, may write", func(t *testing.T) {
			rec := b.doAs(t, "Bearer "+iss.For(t, uuid.NewString(), b.org), http.MethodPost, rulePath(b.org, existing)+"/activate", "")
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			rec = b.doAs(t, "Bearer "+iss.ECToken(t, authtest.Claims(b.org)), http.MethodPost, rulesPath(b.org), createJSON(t, uuid.NewString(), "n", "p", "l"))
			require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
			require.Equal(t, state{rules: 2, active: 1, events: 1}, b.state(t))
		})

		t.Run("the probes stay open", func(t *testing.T) {
			for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
				rec := b.doAs(t, "", http.MethodGet, path, "")
				require.Equal(t, http.StatusOK, rec.Code, path)
			}
		})
	})
}

func TestAuthenticationJWKSDown(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		b := setup(t, d)
		cfg := b.iss.Config()
		cfg.MinRefresh = time.Nanosecond
		// A handler of its own on the same database, whose verifier may refetch at once.
		nb := *b
		nb.e = web.New(slog.New(slog.NewJSONHandler(io.Discard, nil)), b.db.DB)
		NewHandler(b.svc).Register(nb.e, b.iss.Guard(t, &cfg))

		rec := nb.doAs(t, "Bearer "+b.iss.For(t, b.org), http.MethodPost, rulesPath(b.org), createJSON(t, uuid.NewString(), "n", "p", "l"))
		require.Equal(t, http.StatusCreated, rec.Code, "the keys are fetched and cached")
		before := nb.state(t)

		b.iss.SetDown(true)
		unknown := b.iss.Sign(t, jwt.SigningMethodRS256, "rotated-in", b.iss.RSA, authtest.Claims(b.org))
		rec = nb.doAs(t, "Bearer "+unknown, http.MethodPost, rulesPath(b.org), createJSON(t, uuid.NewString(), "n", "p", "l"))
		requireError(t, rec, http.StatusServiceUnavailable, "unavailable")
		require.Equal(t, before, nb.state(t), "nothing written")

		rec = nb.doAs(t, "Bearer "+b.iss.ECToken(t, authtest.Claims(b.org)), http.MethodPost, rulesPath(b.org), createJSON(t, uuid.NewString(), "n", "p", "l"))
		require.Equal(t, http.StatusCreated, rec.Code, "a cached key keeps working while the issuer is down")
	})
}

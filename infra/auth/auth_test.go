package auth_test

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/authtest"
)

type bundle struct {
	iss   *authtest.Issuer
	e     *echo.Echo
	calls *atomic.Int64 // how often the guarded handler ran
	org   string
}

// setup serves one org route behind a guard for a fresh issuer; cfg adjusts the
// verifier's configuration.
func setup(t *testing.T, cfg func(*auth.Config)) *bundle {
	t.Helper()
	iss := authtest.New(t)
	c := iss.Config()
	if cfg != nil {
		cfg(&c)
	}
	g := iss.Guard(t, &c)
	e := echo.New()
	e.HTTPErrorHandler = web.ErrorHandler(slog.New(slog.NewJSONHandler(io.Discard, nil)))
	calls := &atomic.Int64{}
	e.GET("/v1/orgs/:orgId/things", func(c echo.Context) error {
		calls.Add(1)
		require.NotNil(t, auth.ClaimsOf(c))
		return c.NoContent(http.StatusOK)
	}, g.Org("orgId", nil))
	return &bundle{iss: iss, e: e, calls: calls, org: uuid.NewString()}
}

// get sends GET with the given Authorization header values (none when empty).
func (b *bundle) get(t *testing.T, org string, authorization ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/v1/orgs/"+org+"/things", nil)
	for _, a := range authorization {
		req.Header.Add("Authorization", a)
	}
	rec := httptest.NewRecorder()
	b.e.ServeHTTP(rec, req)
	return rec
}

func bearer(tok string) string { return "Bearer " + tok }

// requireRefused checks a 401 with the error body and WWW-Authenticate, and that
// the handler never ran.
func (b *bundle) requireRefused(t *testing.T, rec *httptest.ResponseRecorder, wantError string) {
	t.Helper()
	require.Equal(t, http.StatusUnauthorized, rec.Code, rec.Body.String())
	www := rec.Header().Get("WWW-Authenticate")
	require.True(t, strings.HasPrefix(www, "Bearer "), "WWW-Authenticate %q", www)
	if wantError == "" {
		require.NotContains(t, www, "error=")
	} else {
		require.Contains(t, www, `error="`+wantError+`"`)
	}
	var body web.ErrorBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body))
	require.Equal(t, "unauthorized", body.Error.Code)
	require.NotEmpty(t, body.Error.Message)
	require.Zero(t, b.calls.Load(), "the handler ran")
}

func TestGuard(t *testing.T) {
	t.Parallel()

	t.Run("valid RS256 and ES256 tokens for the org are admitted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		other := uuid.NewString()
		require.Equal(t, http.StatusOK, b.get(t, b.org, bearer(b.iss.For(t, other, b.org))).Code)
		require.Equal(t, http.StatusOK, b.get(t, b.org, bearer(b.iss.ECToken(t, authtest.Claims(b.org)))).Code)
		require.Equal(t, http.StatusOK, b.get(t, strings.ToUpper(b.org), bearer(b.iss.For(t, b.org))).Code, "UUIDs compare by value")
		require.EqualValues(t, 3, b.calls.Load())
	})

	t.Run("aud may be a list that contains the audience", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		c := authtest.Claims(b.org)
		c["aud"] = []string{"someone-else", authtest.Audience}
		require.Equal(t, http.StatusOK, b.get(t, b.org, bearer(b.iss.Token(t, c))).Code)
	})

	t.Run("a token for another org, or without org_ids, is a 404 and the handler never runs", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		rec := b.get(t, b.org, bearer(b.iss.For(t, uuid.NewString())))
		require.Equal(t, http.StatusNotFound, rec.Code)
		require.JSONEq(t, `{"error":{"code":"not_found","message":"not found"}}`, rec.Body.String())
		noOrgs := authtest.Claims()
		delete(noOrgs, "org_ids")
		require.Equal(t, http.StatusNotFound, b.get(t, b.org, bearer(b.iss.Token(t, noOrgs))).Code)
		require.Zero(t, b.calls.Load())
	})

	t.Run("an org that is not a UUID is a 400 even with a valid token", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		rec := b.get(t, "not-a-uuid", bearer(b.iss.For(t, b.org)))
		require.Equal(t, http.StatusBadRequest, rec.Code)
		require.Zero(t, b.calls.Load())
	})

	t.Run("a 400 for a long org repeats at most 64 of its characters", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		rec := b.get(t, strings.Repeat("x", 5000), bearer(b.iss.For(t, b.org)))
		require.Equal(t, http.StatusBadRequest, rec.Code)
		require.Less(t, rec.Body.Len(), 300, rec.Body.String())
		require.Contains(t, rec.Body.String(), strings.Repeat("x", 64)+"…")
		require.NotContains(t, rec.Body.String(), strings.Repeat("x", 65))
		require.Zero(t, b.calls.Load())
	})

	// Every attack gets a 401 and never reaches the handler.
	attacks := []struct {
		name      string
		header    func(t *testing.T, b *bundle) []string
		wantError string // the error= of WWW-Authenticate; "" for none
	}{
		{"no Authorization header", func(*testing.T, *bundle) []string { return nil }, ""},
		{"an empty Authorization header", func(*testing.T, *bundle) []string { return []string{""} }, ""},
		{"another scheme", func(t *testing.T, b *bundle) []string { return []string{"Basic " + b.iss.For(t, b.org)} }, ""},
		{"Bearer without a token", func(*testing.T, *bundle) []string { return []string{"Bearer"} }, ""},
		{"Bearer with blanks only", func(*testing.T, *bundle) []string { return []string{"Bearer   "} }, ""},
		{"two Authorization headers", func(t *testing.T, b *bundle) []string {
			tok := bearer(b.iss.For(t, b.org))
			return []string{tok, tok}
		}, ""},
		{"garbage", func(*testing.T, *bundle) []string { return []string{"Bearer not.a.jwt"} }, "invalid_token"},
		{"expired beyond the leeway", func(t *testing.T, b *bundle) []string {
			c := authtest.Claims(b.org)
			c["exp"] = time.Now().Add(-2 * auth.DefaultLeeway).Unix()
			return []string{bearer(b.iss.Token(t, c))}
		}, "invalid_token"},
		{"not valid yet (nbf) beyond the leeway", func(t *testing.T, b *bundle) []string {
			c := authtest.Claims(b.org)
			c["nbf"] = time.Now().Add(5 * time.Minute).Unix()
			return []string{bearer(b.iss.Token(t, c))}
		}, "invalid_token"},
		{"issued in the future (iat)", func(t *testing.T, b *bundle) []string {
			c := authtest.Claims(b.org)
			c["iat"] = time.Now().Add(5 * time.Minute).Unix()
			return []string{bearer(b.iss.Token(t, c))}
		}, "invalid_token"},
		{"no exp at all", func(t *testing.T, b *bundle) []string {
			c := authtest.Claims(b.org)
			delete(c, "exp")
			return []string{bearer(b.iss.Token(t, c))}
		}, "invalid_token"},
		{"another issuer", func(t *testing.T, b *bundle) []string {
			c := authtest.Claims(b.org)
			c["iss"] = authtest.IssuerURL + "/"
			return []string{bearer(b.iss.Token(t, c))}
		}, "invalid_token"},
		{"no issuer", func(t *testing.T, b *bundle) []string {
			c := authtest.Claims(b.org)
			delete(c, "iss")
			return []string{bearer(b.iss.Token(t, c))}
		}, "invalid_token"},
		{"another audience", func(t *testing.T, b *bundle) []string {
			c := authtest.Claims(b.org)
			c["aud"] = []string{"someone-else"}
			return []string{bearer(b.iss.Token(t, c))}
		}, "invalid_token"},
		{"signed by a key the issuer does not hold (same kid)", func(t *testing.T, b *bundle) []string {
			other, err := rsa.GenerateKey(rand.Reader, 2048)
			require.NoError(t, err)
			return []string{bearer(b.iss.Sign(t, jwt.SigningMethodRS256, authtest.RSAKey, other, authtest.Claims(b.org)))}
		}, "invalid_token"},
		{"claims changed after signing", func(t *testing.T, b *bundle) []string {
			good := b.iss.For(t, uuid.NewString())
			parts := strings.Split(good, ".")
			forged := strings.Split(b.iss.For(t, b.org), ".")
			return []string{bearer(parts[0] + "." + forged[1] + "." + parts[2])}
		}, "invalid_token"},
		{"alg none", func(t *testing.T, b *bundle) []string {
			return []string{bearer(b.iss.Sign(t, jwt.SigningMethodNone, authtest.RSAKey, jwt.UnsafeAllowNoneSignatureType, authtest.Claims(b.org)))}
		}, "invalid_token"},
		{"HS256 keyed with the RSA public key (PEM)", func(t *testing.T, b *bundle) []string {
			return []string{bearer(b.iss.Sign(t, jwt.SigningMethodHS256, authtest.RSAKey, publicPEM(&b.iss.RSA.PublicKey), authtest.Claims(b.org)))}
		}, "invalid_token"},
		{"HS256 keyed with the RSA public key (DER)", func(t *testing.T, b *bundle) []string {
			der, err := x509.MarshalPKIXPublicKey(&b.iss.RSA.PublicKey)
			require.NoError(t, err)
			return []string{bearer(b.iss.Sign(t, jwt.SigningMethodHS256, authtest.RSAKey, der, authtest.Claims(b.org)))}
		}, "invalid_token"},
		{"RS384, an algorithm not accepted, with the right key", func(t *testing.T, b *bundle) []string {
			return []string{bearer(b.iss.Sign(t, jwt.SigningMethodRS384, authtest.RSAKey, b.iss.RSA, authtest.Claims(b.org)))}
		}, "invalid_token"},
		{"RS256 naming the ECDSA key", func(t *testing.T, b *bundle) []string {
			return []string{bearer(b.iss.Sign(t, jwt.SigningMethodRS256, authtest.ECKey, b.iss.RSA, authtest.Claims(b.org)))}
		}, "invalid_token"},
		{"ES256 naming the RSA key", func(t *testing.T, b *bundle) []string {
			return []string{bearer(b.iss.Sign(t, jwt.SigningMethodES256, authtest.RSAKey, b.iss.EC, authtest.Claims(b.org)))}
		}, "invalid_token"},
		{"no kid", func(t *testing.T, b *bundle) []string {
			return []string{bearer(b.iss.Sign(t, jwt.SigningMethodRS256, "", b.iss.RSA, authtest.Claims(b.org)))}
		}, "invalid_token"},
		{"org_ids not a list", func(t *testing.T, b *bundle) []string {
			c := authtest.Claims()
			c["org_ids"] = b.org
			return []string{bearer(b.iss.Token(t, c))}
		}, "invalid_token"},
	}
	for _, a := range attacks {
		t.Run("401: "+a.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			b.requireRefused(t, b.get(t, b.org, a.header(t, b)...), a.wantError)
		})
	}

	t.Run("an expired token says so; one within the leeway passes", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		c := authtest.Claims(b.org)
		c["exp"] = time.Now().Add(-time.Minute).Unix()
		rec := b.get(t, b.org, bearer(b.iss.Token(t, c)))
		b.requireRefused(t, rec, "invalid_token")
		require.Contains(t, rec.Header().Get("WWW-Authenticate"), "expired")

		c["exp"] = time.Now().Add(-auth.DefaultLeeway / 3).Unix()
		require.Equal(t, http.StatusOK, b.get(t, b.org, bearer(b.iss.Token(t, c))).Code)
	})

	t.Run("an unknown key id refreshes the JWKS exactly once, then is a 401", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		require.Equal(t, http.StatusOK, b.get(t, b.org, bearer(b.iss.For(t, b.org))).Code)
		require.EqualValues(t, 1, b.iss.Fetches(), "the first token fetches the keys")
		for range 3 {
			require.Equal(t, http.StatusOK, b.get(t, b.org, bearer(b.iss.For(t, b.org))).Code)
		}
		require.EqualValues(t, 1, b.iss.Fetches(), "known keys never refetch")
		b.calls.Store(0)

		unknown := b.iss.Sign(t, jwt.SigningMethodRS256, "rsa-unknown", b.iss.RSA, authtest.Claims(b.org))
		b.requireRefused(t, b.get(t, b.org, bearer(unknown)), "invalid_token")
		require.EqualValues(t, 2, b.iss.Fetches(), "one refresh for the unknown kid")

		var wg sync.WaitGroup
		for range 20 {
			wg.Go(func() {
				another := b.iss.Sign(t, jwt.SigningMethodRS256, "rsa-"+uuid.NewString(), b.iss.RSA, authtest.Claims(b.org))
				require.Equal(t, http.StatusUnauthorized, b.get(t, b.org, bearer(another)).Code)
			})
		}
		wg.Wait()
		require.EqualValues(t, 2, b.iss.Fetches(), "unknown kids inside MinRefresh fetch nothing")
		require.Zero(t, b.calls.Load())
	})

	t.Run("a rotated-in key is fetched on first sight and admitted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		require.Equal(t, http.StatusOK, b.get(t, b.org, bearer(b.iss.For(t, b.org))).Code)
		next, err := rsa.GenerateKey(rand.Reader, 2048)
		require.NoError(t, err)
		b.iss.Publish(t, map[string]crypto.PublicKey{"rsa-2": &next.PublicKey, authtest.RSAKey: &b.iss.RSA.PublicKey})
		tok := b.iss.Sign(t, jwt.SigningMethodRS256, "rsa-2", next, authtest.Claims(b.org))
		require.Equal(t, http.StatusOK, b.get(t, b.org, bearer(tok)).Code)
		require.EqualValues(t, 2, b.iss.Fetches())
	})

	t.Run("JWKS down: unknown keys are a 503, cached keys keep working", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(c *auth.Config) { c.MinRefresh = time.Nanosecond })
		require.Equal(t, http.StatusOK, b.get(t, b.org, bearer(b.iss.For(t, b.org))).Code)

		b.iss.SetDown(true)
		next, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		require.NoError(t, err)
		tok := b.iss.Sign(t, jwt.SigningMethodES256, "ec-2", next, authtest.Claims(b.org))
		before := b.calls.Load()
		rec := b.get(t, b.org, bearer(tok))
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
		require.JSONEq(t, `{"error":{"code":"unavailable","message":"service unavailable, retry later"}}`, rec.Body.String())
		require.Equal(t, before, b.calls.Load())
		require.Equal(t, http.StatusOK, b.get(t, b.org, bearer(b.iss.For(t, b.org))).Code, "cached key")
		require.Equal(t, http.StatusOK, b.get(t, b.org, bearer(b.iss.ECToken(t, authtest.Claims(b.org)))).Code, "cached key")

		b.iss.Publish(t, map[string]crypto.PublicKey{"ec-2": &next.PublicKey})
		b.iss.SetDown(false)
		require.Equal(t, http.StatusOK, b.get(t, b.org, bearer(tok)).Code, "back up: the new key is fetched")
	})

	t.Run("a symmetric key in the JWKS is never used", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		secret := []byte("a-published-secret-of-32-bytes!!")
		b.iss.Srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			_, _ = w.Write([]byte(`{"keys":[{"kty":"oct","kid":"hmac","k":"YS1wdWJsaXNoZWQtc2VjcmV0LW9mLTMyLWJ5dGVzISE","alg":"HS256"}]}`))
		})
		tok := b.iss.Sign(t, jwt.SigningMethodHS256, "hmac", secret, authtest.Claims(b.org))
		b.requireRefused(t, b.get(t, b.org, bearer(tok)), "invalid_token")
	})

	t.Run("a disabled guard admits everything", func(t *testing.T) {
		t.Parallel()
		e := echo.New()
		e.GET("/v1/orgs/:orgId/things", func(c echo.Context) error { return c.NoContent(http.StatusOK) }, auth.Disabled().Org("orgId", nil))
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/orgs/"+uuid.NewString()+"/things", nil))
		require.Equal(t, http.StatusOK, rec.Code)
	})
}

func TestVerifierStart(t *testing.T) {
	t.Parallel()

	t.Run("Start fetches once and the refresh loop drops keys the issuer removed", func(t *testing.T) {
		t.Parallel()
		iss := authtest.New(t)
		c := iss.Config()
		c.RefreshInterval = 20 * time.Millisecond
		v, err := auth.NewVerifier(c, slog.New(slog.NewJSONHandler(io.Discard, nil)))
		require.NoError(t, err)
		require.NoError(t, v.Start(t.Context()))
		t.Cleanup(func() { _ = v.Stop(t.Context()) })
		require.GreaterOrEqual(t, iss.Fetches(), int64(1))
		org := uuid.NewString()
		_, err = v.Verify(t.Context(), iss.For(t, org))
		require.NoError(t, err)

		iss.Publish(t, map[string]crypto.PublicKey{authtest.ECKey: &iss.EC.PublicKey})
		require.Eventually(t, func() bool {
			_, err := v.Verify(t.Context(), iss.For(t, org))
			var invalid *auth.InvalidTokenError
			return errors.As(err, &invalid)
		}, 5*time.Second, 10*time.Millisecond, "the removed RSA key stops working")
	})

	t.Run("a missing setting is refused naming its variable", func(t *testing.T) {
		t.Parallel()
		for name, c := range map[string]auth.Config{
			"AUTH_JWKS_URL": {Issuer: "i", Audience: "a"},
			"AUTH_ISSUER":   {JWKSURL: "http://x", Audience: "a"},
			"AUTH_AUDIENCE": {JWKSURL: "http://x", Issuer: "i"},
		} {
			_, err := auth.NewVerifier(c, slog.Default())
			require.ErrorContains(t, err, name)
		}
	})
}

func publicPEM(pub *rsa.PublicKey) []byte {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

func TestRefusedMetric(t *testing.T) {
	// Not parallel: it reads a process-wide counter around its own requests.
	b := setup(t, nil)
	read := func(reason string) float64 {
		var m dto.Metric
		c, err := auth.RefusedCounter(reason)
		require.NoError(t, err)
		require.NoError(t, c.Write(&m))
		return m.GetCounter().GetValue()
	}
	c := authtest.Claims(b.org)
	c["exp"] = time.Now().Add(-time.Hour).Unix()
	cases := []struct {
		reason string
		header []string
	}{
		{"missing", nil},
		{"invalid", []string{"Bearer x.y.z"}},
		{"expired", []string{bearer(b.iss.Token(t, c))}},
		{"org", []string{bearer(b.iss.For(t, uuid.NewString()))}},
	}
	for _, tc := range cases {
		before := read(tc.reason)
		b.get(t, b.org, tc.header...)
		require.Equal(t, before+1, read(tc.reason), tc.reason)
	}
}

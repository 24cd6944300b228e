// Package authtest is a token issuer for tests: keys generated in the test (RSA
// and ECDSA), their JWKS served by an httptest server that counts its fetches and
// can be taken down, and real signed tokens with any claims. Test code only.
package authtest

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/MicahParks/jwkset"
	"github.com/golang-jwt/jwt/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/auth"
)

// The issuer and audience every Issuer's tokens carry by default.
const (
	IssuerURL = "https://issuer.test/outboxpair"
	Audience  = "outboxpair"
)

// Key ids of the two published keys.
const (
	RSAKey = "rsa-1"
	ECKey  = "ec-1"
)

// Issuer holds the signing keys and serves their JWKS.
type Issuer struct {
	RSA *rsa.PrivateKey
	EC  *ecdsa.PrivateKey
	Srv *httptest.Server

	fetches atomic.Int64
	down    atomic.Bool

	mu   sync.Mutex
	jwks []byte
}

// The keys are generated once per test binary (RSA generation is slow); every
// Issuer serves them from a server of its own.
var (
	keysOnce sync.Once
	rsaKey   *rsa.PrivateKey
	ecKey    *ecdsa.PrivateKey
	keysErr  error
)

func keys() (*rsa.PrivateKey, *ecdsa.PrivateKey, error) {
	keysOnce.Do(func() {
		if rsaKey, keysErr = rsa.GenerateKey(rand.Reader, 2048); keysErr != nil {
			return
		}
		ecKey, keysErr = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	})
	return rsaKey, ecKey, keysErr
}

// New starts a JWKS server publishing the test binary's RSA and ECDSA keys,
// closed when t ends.
func New(t testing.TB) *Issuer {
	t.Helper()
	rk, ek, err := keys()
	require.NoError(t, err)
	iss := &Issuer{RSA: rk, EC: ek}
	iss.Publish(t, map[string]crypto.PublicKey{RSAKey: &rk.PublicKey, ECKey: &ek.PublicKey})
	iss.Srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		iss.fetches.Add(1)
		if iss.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		iss.mu.Lock()
		body := iss.jwks
		iss.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	}))
	t.Cleanup(iss.Srv.Close)
	return iss
}

// Publish replaces the served JWKS with keys (kid → public key).
func (iss *Issuer) Publish(t testing.TB, keys map[string]crypto.PublicKey) {
	t.Helper()
	var set jwkset.JWKSMarshal
	for kid, pub := range keys {
		jwk, err := jwkset.NewJWKFromKey(pub, jwkset.JWKOptions{Metadata: jwkset.JWKMetadataOptions{KID: kid, USE: jwkset.UseSig}})
		require.NoError(t, err)
		set.Keys = append(set.Keys, jwk.Marshal())
	}
	raw, err := json.Marshal(set)
	require.NoError(t, err)
	iss.mu.Lock()
	iss.jwks = raw
	iss.mu.Unlock()
}

// JWKSURL is the URL of the served JWKS.
func (iss *Issuer) JWKSURL() string { return iss.Srv.URL + "/jwks" }

// Fetches is how many times the JWKS was requested.
func (iss *Issuer) Fetches() int64 { return iss.fetches.Load() }

// SetDown makes the JWKS server answer 503 (true) or serve again (false).
func (iss *Issuer) SetDown(down bool) { iss.down.Store(down) }

// Config is a verifier configuration for this issuer. MinRefresh is an hour, so a
// test sees exactly the fetches it causes; lower it where a test needs more.
func (iss *Issuer) Config() auth.Config {
	return auth.Config{
		JWKSURL: iss.JWKSURL(), Issuer: IssuerURL, Audience: Audience,
		MinRefresh: time.Hour, RefreshInterval: time.Hour,
	}
}

// Guard returns a guard verifying against this issuer with cfg (Config when nil).
func (iss *Issuer) Guard(t testing.TB, cfg *auth.Config) *auth.Guard {
	t.Helper()
	c := iss.Config()
	if cfg != nil {
		c = *cfg
	}
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	v, err := auth.NewVerifier(c, logger)
	require.NoError(t, err)
	return auth.NewGuard(v, logger)
}

// Claims returns valid claims for orgs: this issuer, the audience, valid from a
// minute ago for an hour.
func Claims(orgs ...string) jwt.MapClaims {
	now := time.Now()
	return jwt.MapClaims{
		"iss": IssuerURL, "aud": Audience, "sub": "test-client",
		"iat": now.Add(-time.Minute).Unix(), "nbf": now.Add(-time.Minute).Unix(),
		"exp": now.Add(time.Hour).Unix(), "org_ids": orgs,
	}
}

// Token returns claims signed with RS256 by the RSA key.
func (iss *Issuer) Token(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	return iss.Sign(t, jwt.SigningMethodRS256, RSAKey, iss.RSA, claims)
}

// ECToken returns claims signed with ES256 by the ECDSA key.
func (iss *Issuer) ECToken(t testing.TB, claims jwt.MapClaims) string {
	t.Helper()
	return iss.Sign(t, jwt.SigningMethodES256, ECKey, iss.EC, claims)
}

// ForPath returns a valid ES256 token for the org a /v1/orgs/{orgId}/... path
// names, whatever it is: handler tests use it to pass the guard on every request.
func (iss *Issuer) ForPath(t testing.TB, path string) string {
	t.Helper()
	parts := strings.SplitN(path, "/", 5) // "", "v1", "orgs", org, rest
	org := ""
	if len(parts) >= 4 {
		org, _, _ = strings.Cut(parts[3], "?")
	}
	return iss.ECToken(t, Claims(org))
}

// For returns a valid RS256 token for orgs.
func (iss *Issuer) For(t testing.TB, orgs ...string) string {
	t.Helper()
	return iss.Token(t, Claims(orgs...))
}

// Sign signs claims with any method, key id and key (attacks included: a nil kid
// leaves the header without one).
func (iss *Issuer) Sign(t testing.TB, m jwt.SigningMethod, kid string, key any, claims jwt.MapClaims) string {
	t.Helper()
	tok := jwt.NewWithClaims(m, claims)
	if kid != "" {
		tok.Header["kid"] = kid
	}
	s, err := tok.SignedString(key)
	require.NoError(t, err)
	return s
}

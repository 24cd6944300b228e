// Package auth makes the services OAuth 2.0 resource servers (contract section 8):
// every /v1 request carries "Authorization: Bearer <JWT>", verified against the
// issuer's published keys (JWKS, fetched and cached), its iss, aud, exp and nbf,
// and admitted only to the orgs its org_ids claim lists. The HTTP slices declare
// which path parameter names the org (Guard.Org); nothing else in them knows about
// tokens.
//
// Tokens are parsed and their signatures checked by github.com/golang-jwt/jwt/v5,
// and JWKs are decoded by github.com/MicahParks/jwkset; this package holds none of
// the cryptography, only the policy: which algorithms, which keys, when to refetch.
package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Algorithms are the only signing algorithms accepted. Anything else, "none" and
// the HMAC family above all, is refused before any key is looked at.
var Algorithms = []string{"RS256", "ES256"}

// Defaults of Config's optional fields.
const (
	DefaultLeeway          = 30 * time.Second
	DefaultMinRefresh      = 10 * time.Second
	DefaultRefreshInterval = time.Hour
	DefaultFetchTimeout    = 5 * time.Second
)

// ErrUnavailable means the issuer's keys could not be fetched to check a token
// that names a key id not cached yet; the request is answered 503, not 401,
// because the token may well be good.
var ErrUnavailable = errors.New("the token issuer's keys are unavailable")

// Config is what a Verifier checks tokens against.
type Config struct {
	JWKSURL  string // the issuer's JWKS (AUTH_JWKS_URL)
	Issuer   string // the iss a token must carry, compared exactly (AUTH_ISSUER)
	Audience string // a value the token's aud must contain (AUTH_AUDIENCE)

	// Optional; zero values take the defaults above.
	Leeway          time.Duration    // clock skew allowed on exp, nbf and iat
	MinRefresh      time.Duration    // least time between two fetches caused by unknown key ids
	RefreshInterval time.Duration    // period of the background refresh, so removed keys stop working
	FetchTimeout    time.Duration    // bound of one JWKS fetch
	Client          *http.Client     // for the JWKS; a client with FetchTimeout when nil
	Now             func() time.Time // the clock; time.Now when nil
}

// Claims are the claims a verified token carries.
type Claims struct {
	jwt.RegisteredClaims
	OrgIDs []string `json:"org_ids"` // the orgs the caller may act on
	Scope  string   `json:"scope"`   // space-separated scopes (RFC 9068); OperatorScope opens the console
}

// OperatorScope is the scope that admits a token's holder to the operator
// console (contract section 8).
const OperatorScope = "outbox:operator"

// HasScope reports whether the token's scope claim lists s.
func (c *Claims) HasScope(s string) bool {
	for _, f := range strings.Fields(c.Scope) {
		if f == s {
			return true
		}
	}
	return false
}

// Verifier checks bearer tokens. It is safe for concurrent use.
type Verifier struct {
	cfg    Config
	keys   *keySet
	parser *jwt.Parser
	logger *slog.Logger

	stop chan struct{}
	done sync.WaitGroup
}

// NewVerifier returns a verifier for cfg. It fetches nothing until Start or the
// first token, so it works without fx and without a reachable issuer.
func NewVerifier(cfg Config, logger *slog.Logger) (*Verifier, error) {
	switch {
	case cfg.JWKSURL == "":
		return nil, errors.New("AUTH_JWKS_URL: required")
	case cfg.Issuer == "":
		return nil, errors.New("AUTH_ISSUER: required")
	case cfg.Audience == "":
		return nil, errors.New("AUTH_AUDIENCE: required")
	}
	if cfg.Leeway == 0 {
		cfg.Leeway = DefaultLeeway
	}
	if cfg.MinRefresh == 0 {
		cfg.MinRefresh = DefaultMinRefresh
	}
	if cfg.RefreshInterval == 0 {
		cfg.RefreshInterval = DefaultRefreshInterval
	}
	if cfg.FetchTimeout == 0 {
		cfg.FetchTimeout = DefaultFetchTimeout
	}
	if cfg.Client == nil {
		// A transport of its own: nothing else that closes idle connections on
		// http.DefaultTransport can break a fetch in flight.
		cfg.Client = &http.Client{Timeout: cfg.FetchTimeout, Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Verifier{
		cfg: cfg,
		keys: &keySet{
			url: cfg.JWKSURL, client: cfg.Client, minRefresh: cfg.MinRefresh,
			now: cfg.Now, logger: logger,
		},
		parser: jwt.NewParser(
			jwt.WithValidMethods(Algorithms),
			jwt.WithIssuer(cfg.Issuer),
			jwt.WithAudience(cfg.Audience),
			jwt.WithExpirationRequired(),
			jwt.WithIssuedAt(),
			jwt.WithLeeway(cfg.Leeway),
			jwt.WithTimeFunc(cfg.Now),
		),
		logger: logger,
	}, nil
}

// Verify returns the claims of a valid token. An invalid token (bad signature, an
// algorithm other than RS256/ES256, a key of the wrong type, an unknown key id,
// expired, not yet valid, another issuer or audience, malformed) is an
// *InvalidTokenError; a token whose key could not be fetched is an error wrapping
// ErrUnavailable.
func (v *Verifier) Verify(ctx context.Context, raw string) (*Claims, error) {
	var claims Claims
	_, err := v.parser.ParseWithClaims(raw, &claims, v.keyfunc(ctx))
	switch {
	case err == nil:
		return &claims, nil
	case errors.Is(err, ErrUnavailable):
		return nil, err
	default:
		return nil, &InvalidTokenError{Err: err}
	}
}

// keyfunc picks the key the token's kid names and checks that its type fits the
// token's algorithm (the parser has already refused every algorithm but RS256 and
// ES256), so no key can be used with an algorithm it was not made for.
func (v *Verifier) keyfunc(ctx context.Context) jwt.Keyfunc {
	return func(t *jwt.Token) (any, error) {
		kid, _ := t.Header["kid"].(string)
		if kid == "" {
			return nil, errors.New("the token names no key id (kid)")
		}
		k, err := v.keys.get(ctx, kid)
		if err != nil {
			return nil, err
		}
		alg := t.Method.Alg()
		if k.alg != "" && k.alg != alg {
			return nil, fmt.Errorf("key %q is for %s, the token says %s", kid, k.alg, alg)
		}
		switch key := k.key.(type) {
		case *rsa.PublicKey:
			if alg == "RS256" && key.N.BitLen() >= 2048 {
				return key, nil
			}
		case *ecdsa.PublicKey:
			if alg == "ES256" && key.Curve == elliptic.P256() {
				return key, nil
			}
		}
		return nil, fmt.Errorf("key %q does not fit algorithm %s", kid, alg)
	}
}

// Start fetches the keys once (a failure is logged, not fatal: the first token
// retries it) and refreshes them every RefreshInterval until Stop.
func (v *Verifier) Start(ctx context.Context) error {
	if err := v.keys.refresh(ctx); err == nil {
		v.logger.Info("auth: JWKS fetched", "url", v.cfg.JWKSURL)
	}
	v.stop = make(chan struct{})
	v.done.Add(1)
	go func() {
		defer v.done.Done()
		tick := time.NewTicker(v.cfg.RefreshInterval)
		defer tick.Stop()
		for {
			select {
			case <-v.stop:
				return
			case <-tick.C:
				_ = v.keys.refresh(context.Background())
			}
		}
	}()
	return nil
}

// Stop ends the background refresh.
func (v *Verifier) Stop(context.Context) error {
	if v.stop != nil {
		close(v.stop)
		v.done.Wait()
		v.stop = nil
	}
	return nil
}

// InvalidTokenError is a token that does not verify; Err says why (for logs and
// tests, never for the caller beyond "expired" or "invalid").
type InvalidTokenError struct{ Err error }

func (e *InvalidTokenError) Error() string { return "invalid token: " + e.Err.Error() }
func (e *InvalidTokenError) Unwrap() error { return e.Err }

package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/MicahParks/jwkset"
)

// maxJWKS bounds the JWKS document read from the issuer.
const maxJWKS = 1 << 20

// errUnknownKey means the token names a key id the issuer does not publish, even
// after a refresh: the token is invalid (401).
var errUnknownKey = errors.New("unknown key id")

// keySet is the cache of the issuer's verification keys. Lookups of a known key id
// never touch the network; an unknown id refreshes the set, at most once every
// minRefresh whatever the traffic, and concurrent lookups share that one fetch.
// A failed fetch keeps the keys fetched before, so known keys keep working while
// the issuer is down.
type keySet struct {
	url        string
	client     *http.Client
	minRefresh time.Duration
	now        func() time.Time
	logger     *slog.Logger

	keys atomic.Pointer[map[string]publicKey] // kid → key; replaced whole on a fetch

	mu          sync.Mutex // serialises fetches; guards the fields below
	lastAttempt time.Time  // of any fetch
	lastUnknown time.Time  // of the last fetch an unknown key id caused
	lastErr     error      // of the last fetch
}

// publicKey is one usable signing key: an RSA or ECDSA public key and the JWK's
// alg, when the issuer states one.
type publicKey struct {
	key any
	alg string
}

func (s *keySet) lookup(kid string) (publicKey, bool) {
	m := s.keys.Load()
	if m == nil {
		return publicKey{}, false
	}
	k, ok := (*m)[kid]
	return k, ok
}

// get returns the key kid names. It fails with errUnknownKey when the issuer does
// not publish it, and with an error wrapping ErrUnavailable when the set could not
// be fetched, so the caller can tell "your token is bad" from "try again later".
func (s *keySet) get(ctx context.Context, kid string) (publicKey, error) {
	if k, ok := s.lookup(kid); ok {
		return k, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if k, ok := s.lookup(kid); ok { // fetched while this lookup waited
		return k, nil
	}
	now := s.now()
	loaded := s.keys.Load() != nil
	// Until a first fetch succeeds, any fetch counts against the limit; after it,
	// only the fetches unknown key ids caused (so the start's fetch does not delay
	// a key rotated in just after).
	last := s.lastUnknown
	if !loaded {
		last = s.lastAttempt
	}
	if !last.IsZero() && now.Sub(last) < s.minRefresh {
		if s.lastErr != nil {
			return publicKey{}, fmt.Errorf("%w: %w", ErrUnavailable, s.lastErr)
		}
		return publicKey{}, errUnknownKey
	}
	if loaded {
		s.lastUnknown = now
	}
	if err := s.refreshLocked(ctx); err != nil {
		return publicKey{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if k, ok := s.lookup(kid); ok {
		return k, nil
	}
	return publicKey{}, errUnknownKey
}

// refresh fetches the set now, whatever the rate limit; the periodic refresh and
// the start use it.
func (s *keySet) refresh(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.refreshLocked(ctx)
}

func (s *keySet) refreshLocked(ctx context.Context) error {
	s.lastAttempt = s.now()
	// The fetch serves every waiting request: one caller's cancellation must not
	// fail it for the others.
	keys, err := s.fetch(context.WithoutCancel(ctx))
	s.lastErr = err
	if err != nil {
		s.logger.Warn("auth: JWKS fetch failed; keeping the keys fetched before", "url", s.url, "error", err)
		return err
	}
	s.keys.Store(&keys)
	return nil
}

func (s *keySet) fetch(ctx context.Context) (map[string]publicKey, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxJWKS))
		return nil, fmt.Errorf("JWKS answered %d", resp.StatusCode)
	}
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKS+1))
	if err != nil {
		return nil, fmt.Errorf("read JWKS: %w", err)
	}
	if len(raw) > maxJWKS {
		return nil, fmt.Errorf("JWKS is larger than %d bytes", maxJWKS)
	}
	return parseJWKS(raw, s.logger)
}

// parseJWKS keeps the set's RSA and ECDSA public signing keys that have a key id.
// Any other key (a symmetric "oct" key above all: with one, an HS256 token signed
// with a published value would verify) is skipped, and so is a key that does not
// parse, so one odd key does not take the others down.
func parseJWKS(raw []byte, logger *slog.Logger) (map[string]publicKey, error) {
	var set struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(raw, &set); err != nil {
		return nil, fmt.Errorf("JWKS is not a JSON key set: %w", err)
	}
	keys := make(map[string]publicKey, len(set.Keys))
	for _, k := range set.Keys {
		jwk, err := jwkset.NewJWKFromRawJSON(k, jwkset.JWKMarshalOptions{}, jwkset.JWKValidateOptions{})
		if err != nil {
			logger.Warn("auth: JWKS key skipped: it does not parse", "error", err)
			continue
		}
		m := jwk.Marshal()
		if m.KID == "" || (m.USE != "" && m.USE != jwkset.UseSig) {
			continue
		}
		switch jwk.Key().(type) {
		case *rsa.PublicKey, *ecdsa.PublicKey:
			keys[m.KID] = publicKey{key: jwk.Key(), alg: m.ALG.String()}
		}
	}
	return keys, nil
}

package webhook_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/webhook"
)

// newSecret is a fresh Standard Webhooks secret of 32 random bytes.
func newSecret(t testing.TB) string {
	t.Helper()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// received is one request as the test server saw it.
type received struct {
	header http.Header
	body   []byte
}

// provider is a test server answering each request with answer, recording it.
type provider struct {
	*httptest.Server
	mu   sync.Mutex
	got  []received
	hits int
}

func newProvider(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, n int)) *provider {
	t.Helper()
	p := &provider{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		p.mu.Lock()
		p.got = append(p.got, received{header: r.Header.Clone(), body: body})
		p.hits++
		n := p.hits
		p.mu.Unlock()
		answer(w, r, n)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *provider) requests() []received {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]received(nil), p.got...)
}

func newClient(t *testing.T, url string, secrets ...string) *webhook.Client {
	t.Helper()
	c, err := webhook.New(webhook.Config{URL: url, Secrets: secrets, Timeout: 5 * time.Second}, nil)
	require.NoError(t, err)
	return c
}

func message() outbox.Message {
	return outbox.Message{
		ID:        uuid.Must(uuid.NewV7()),
		Tag:       "QuotaChanged",
		Payload:   json.RawMessage(`{"orgId":"0197a3c2-6a1e-7c3b-9f1d-2b4e5a6c7d8e","activeRules":3}`),
		CreatedAt: 1_700_000_000_000,
		Attempt:   1,
	}
}

func status(code int) func(http.ResponseWriter, *http.Request, int) {
	return func(w http.ResponseWriter, _ *http.Request, _ int) { w.WriteHeader(code) }
}

func TestCallSendsTheEnvelopeKeyedAndSigned(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	p := newProvider(t, status(http.StatusNoContent))
	m := message()
	require.NoError(t, newClient(t, p.URL, secret).Call(t.Context(), m), "a 2xx settles")

	got := p.requests()
	require.Len(t, got, 1)
	r := got[0]
	require.JSONEq(t, `{"id":"`+m.ID.String()+`","type":"QuotaChanged","occurredAt":1700000000000,
		"payload":{"orgId":"0197a3c2-6a1e-7c3b-9f1d-2b4e5a6c7d8e","activeRules":3}}`, string(r.body))
	require.Equal(t, "application/json", r.header.Get("Content-Type"))
	require.Equal(t, m.ID.String(), r.header.Get("Idempotency-Key"), "the key is the row id")
	require.Equal(t, m.ID.String(), r.header.Get("webhook-id"))
	require.Regexp(t, `^v1,[A-Za-z0-9+/]+=*$`, r.header.Get("webhook-signature"), "one secret, one signature")
	ts := r.header.Get("webhook-timestamp")
	require.Regexp(t, `^[0-9]+$`, ts)

	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	require.NoError(t, wh.Verify(r.body, r.header), "the library verifies it")
	other, err := standardwebhooks.NewWebhook(newSecret(t))
	require.NoError(t, err)
	require.Error(t, other.Verify(r.body, r.header), "another secret does not")
	tampered := append([]byte(nil), r.body...)
	tampered[len(tampered)-2] = '4'
	require.Error(t, wh.Verify(tampered, r.header), "nor another body")
}

// TestRotation: with two secrets every request carries two signatures, and a
// provider that knows only one of them (the old before it switches, the new
// after) verifies it.
func TestRotation(t *testing.T) {
	t.Parallel()
	oldSecret, newSecret_ := newSecret(t), newSecret(t)
	p := newProvider(t, status(http.StatusOK))
	require.NoError(t, newClient(t, p.URL, newSecret_, oldSecret).Call(t.Context(), message()))
	r := p.requests()[0]
	require.Len(t, strings.Fields(r.header.Get("webhook-signature")), 2)
	for _, s := range []string{newSecret_, oldSecret} {
		wh, err := standardwebhooks.NewWebhook(s)
		require.NoError(t, err)
		require.NoError(t, wh.Verify(r.body, r.header))
	}
	third, err := standardwebhooks.NewWebhook(newSecret(t))
	require.NoError(t, err)
	require.ErrorIs(t, third.Verify(r.body, r.header), standardwebhooks.ErrNoMatchingSignature)

	secrets, err := webhook.ParseSecrets("  " + newSecret_ + "   " + oldSecret + " ")
	require.NoError(t, err)
	require.Equal(t, []string{newSecret_, oldSecret}, secrets, "PROVIDER_SECRET: separated by spaces, in order")
}

func TestAnswers(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	long := strings.Repeat("x", 1000)
	for name, c := range map[string]struct {
		answer    func(http.ResponseWriter, *http.Request, int)
		permanent bool
		after     time.Duration // want RetryAfterOf; 0: none
		contains  string
	}{
		"500 is retried": {answer: status(500), contains: "500 Internal Server Error"},
		"502 is retried": {answer: status(502), contains: "502"},
		"429 with Retry-After in seconds waits that long": {answer: func(w http.ResponseWriter, _ *http.Request, _ int) {
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusTooManyRequests)
		}, after: 2 * time.Minute, contains: "429"},
		"503 with Retry-After as an HTTP date waits until then": {answer: func(w http.ResponseWriter, _ *http.Request, _ int) {
			w.Header().Set("Retry-After", time.Now().Add(10*time.Minute).UTC().Format(http.TimeFormat))
			w.WriteHeader(http.StatusServiceUnavailable)
		}, after: 10 * time.Minute, contains: "503"},
		"a Retry-After that is neither is ignored": {answer: func(w http.ResponseWriter, _ *http.Request, _ int) {
			w.Header().Set("Retry-After", "soon")
			w.WriteHeader(http.StatusServiceUnavailable)
		}, contains: "503"},
		"410 dead-letters": {answer: func(w http.ResponseWriter, _ *http.Request, _ int) {
			w.WriteHeader(http.StatusGone)
			_, _ = io.WriteString(w, "endpoint disabled\n"+long)
		}, permanent: true, contains: "410 Gone: endpoint disabled xxx"},
		"400 dead-letters": {answer: status(400), permanent: true, contains: "400"},
		"404 dead-letters": {answer: status(404), permanent: true, contains: "404"},
		"422 dead-letters": {answer: status(422), permanent: true, contains: "422"},
		"a 4xx ignores Retry-After": {answer: func(w http.ResponseWriter, _ *http.Request, _ int) {
			w.Header().Set("Retry-After", "60")
			w.WriteHeader(http.StatusForbidden)
		}, permanent: true, contains: "403"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := newProvider(t, c.answer)
			err := newClient(t, p.URL, secret).Call(t.Context(), message())
			require.Error(t, err)
			require.Contains(t, err.Error(), c.contains)
			require.NotContains(t, err.Error(), strings.TrimPrefix(secret, "whsec_"), "never the secret")
			require.Equal(t, c.permanent, outbox.IsPermanent(err))
			d, ok := outbox.RetryAfterOf(err)
			if c.after == 0 {
				require.False(t, ok, "no Retry-After: the relay's backoff alone")
				return
			}
			require.True(t, ok)
			// An HTTP date has whole seconds.
			require.InDelta(t, c.after.Seconds(), d.Seconds(), 2)
		})
	}

	t.Run("the answer quoted in the error is clipped", func(t *testing.T) {
		t.Parallel()
		p := newProvider(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
			w.WriteHeader(http.StatusGone)
			_, _ = io.WriteString(w, long)
		})
		err := newClient(t, p.URL, secret).Call(t.Context(), message())
		require.Error(t, err)
		require.Less(t, len(err.Error()), 400)
		require.Contains(t, err.Error(), strings.Repeat("x", 256))
	})
}

func TestRedirectIsNotFollowed(t *testing.T) {
	t.Parallel()
	target := newProvider(t, status(http.StatusOK))
	p := newProvider(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		http.Redirect(w, r, target.URL+"/elsewhere", http.StatusTemporaryRedirect)
	})
	err := newClient(t, p.URL, newSecret(t)).Call(t.Context(), message())
	require.Error(t, err)
	require.Contains(t, err.Error(), "307")
	require.Contains(t, err.Error(), target.URL+"/elsewhere", "the error names where it was sent")
	require.False(t, outbox.IsPermanent(err), "retried while the operator fixes PROVIDER_URL")
	require.Empty(t, target.requests(), "the redirect was not followed")
}

func TestTimeouts(t *testing.T) {
	t.Parallel()
	t.Run("a provider that does not answer is cut off at the timeout, a failed attempt", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		p := newProvider(t, func(w http.ResponseWriter, r *http.Request, _ int) {
			select { // held until the client gives up or the test ends
			case <-r.Context().Done():
			case <-release:
			}
		})
		defer close(release)
		c, err := webhook.New(webhook.Config{URL: p.URL, Secrets: []string{newSecret(t)}, Timeout: 300 * time.Millisecond}, nil)
		require.NoError(t, err)
		start := time.Now()
		err = c.Call(t.Context(), message())
		require.Error(t, err)
		require.Less(t, time.Since(start), 5*time.Second)
		require.False(t, outbox.IsPermanent(err))
	})

	t.Run("a provider that is down is a failed attempt", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := l.Addr().String()
		require.NoError(t, l.Close()) // nothing listens there now
		err = newClient(t, "http://"+addr+"/hooks", newSecret(t)).Call(t.Context(), message())
		require.Error(t, err)
		require.False(t, outbox.IsPermanent(err))
	})

	t.Run("the relay's context bounds the call", func(t *testing.T) {
		t.Parallel()
		p := newProvider(t, func(_ http.ResponseWriter, r *http.Request, _ int) { <-r.Context().Done() })
		ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
		defer cancel()
		err := newClient(t, p.URL, newSecret(t)).Call(ctx, message())
		require.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
	})
}

func TestSettingsAreChecked(t *testing.T) {
	t.Parallel()
	good := newSecret(t)
	for _, c := range []struct{ value, want string }{
		{"", "PROVIDER_SECRET: required but not set"},
		{"   ", "PROVIDER_SECRET: required but not set"},
		{"not-a-secret", `PROVIDER_SECRET: secret 1 of 1: does not start with "whsec_"`},
		{good + " whsec_***", `PROVIDER_SECRET: secret 2 of 2: is not "whsec_" followed by standard base64`},
		{"whsec_" + base64.StdEncoding.EncodeToString([]byte("short")), "PROVIDER_SECRET: secret 1 of 1: holds 5 bytes, want 24 to 64"},
	} {
		_, err := webhook.ParseSecrets(c.value)
		require.ErrorContains(t, err, c.want, "%q", c.value)
		require.NotContains(t, err.Error(), "not-a-secret", "a secret is never quoted")
	}
	for _, u := range []string{"", "provider:8082", "ftp://h/x", "http://"} {
		_, err := webhook.New(webhook.Config{URL: u, Secrets: []string{good}}, nil)
		require.ErrorContains(t, err, "PROVIDER_URL: ", "%q", u)
	}
	_, err := webhook.New(webhook.Config{URL: "ftp://user:pw@provider/hooks?token=s3cret", Secrets: []string{good}}, nil)
	require.EqualError(t, err, `PROVIDER_URL: "ftp://provider/hooks" is not an absolute http(s) URL`, "quoted without its credentials")
	_, err = webhook.New(webhook.Config{URL: "http://provider:8082/hooks"}, nil)
	require.ErrorContains(t, err, "PROVIDER_SECRET")
	_, err = webhook.New(webhook.Config{URL: "http://provider:8082/hooks", Secrets: []string{"whsec_"}}, nil)
	require.ErrorContains(t, err, "PROVIDER_SECRET: secret 1 of 1")
}

// TestConnectionsAreKeptForEveryWorker: at its default pool, a client whose
// calls come 40 at a time (the relay's default workers) dials 40 connections
// for the first 40 calls and none for the next 40: each is kept idle between
// calls, where a smaller pool would close the rest and dial them again.
func TestConnectionsAreKeptForEveryWorker(t *testing.T) {
	t.Parallel()
	const workers = outbox.DefaultWorkers
	var (
		mu     sync.Mutex
		dialed int
		wave   chan struct{} // closed once the wave's calls are all in the handler
		inside int
	)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		mu.Lock()
		gate := wave
		if inside++; inside == workers {
			close(gate)
		}
		mu.Unlock()
		<-gate // every call of the wave holds its connection until all are in
		w.WriteHeader(http.StatusOK)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			mu.Lock()
			dialed++
			mu.Unlock()
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c, err := webhook.New(webhook.Config{URL: srv.URL, Secrets: []string{newSecret(t)}, Timeout: 10 * time.Second}, nil)
	require.NoError(t, err)

	for round := range 2 {
		mu.Lock()
		wave, inside = make(chan struct{}), 0
		mu.Unlock()
		errs := make([]error, workers)
		var wg sync.WaitGroup
		for i := range workers {
			wg.Go(func() { errs[i] = c.Call(t.Context(), message()) })
		}
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "round %d, call %d", round, i)
		}
		mu.Lock()
		got := dialed
		mu.Unlock()
		require.Equal(t, workers, got, "round %d: connections dialled in all", round)
	}
}

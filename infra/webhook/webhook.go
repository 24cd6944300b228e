// Package webhook calls an outside provider from an outbox row: the row is the
// call's durable intent, written in the transaction of the change that decided
// on it, and the relay calls until the provider answers 2xx (or the row is
// dead-lettered). Each call is an HTTP POST of the row's envelope (the JSON of
// contract section 4: {"id","type","occurredAt","payload"}), keyed and signed
// as Standard Webhooks say (https://www.standardwebhooks.com): the headers
// Idempotency-Key and webhook-id carry the row id, the same on every attempt;
// webhook-timestamp is this attempt's time; webhook-signature holds one
// "v1,<base64 HMAC-SHA256 of id.timestamp.body>" per secret, signed by the
// Standard Webhooks library, not code of ours. The provider's answer becomes
// the row's settlement: 2xx processed; 429 and 5xx retried with the relay's
// backoff, no sooner than a Retry-After asks; 410 and every other 4xx
// dead-lettered at once (no retry changes the provider's mind), the status
// and the start of the answer in last_error. docs/calling-the-outside-world.md
// says why and what the provider must do.
package webhook

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/acme/outboxpair/infra/delivery"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/infra/wire"
)

const (
	// DefaultTimeout bounds one call, from dialling to the end of the answer's
	// headers: the low end of the 15 to 30 s the Standard Webhooks spec
	// recommends, so a provider that hangs holds a relay worker no longer than
	// that, and well inside the relay's handler timeout (OUTBOX_HANDLER_TIMEOUT,
	// 30 s by default), which bounds the call too.
	DefaultTimeout = 15 * time.Second
	// DefaultConnectTimeout bounds the TCP connect and the TLS handshake: a
	// provider that is down is known in seconds, not at the total timeout.
	DefaultConnectTimeout = 5 * time.Second

	// snippetBytes bounds the part of an error answer quoted in last_error.
	snippetBytes = 256
	// drainBytes bounds what is read of an answer so its connection can be
	// reused; a longer answer costs a new connection, not an unbounded read.
	drainBytes = 64 << 10
	// secretPrefix starts a Standard Webhooks symmetric secret.
	secretPrefix = "whsec_"
	// A secret's key is at least 24 and at most 64 bytes (the spec's 192 to
	// 512 bits).
	minKeyBytes, maxKeyBytes = 24, 64
)

// Config is what a Client needs: the provider's URL, the secrets that sign,
// the timeouts.
type Config struct {
	// URL is where each row is POSTed (PROVIDER_URL), an absolute http(s) URL,
	// used as it is: a redirect is never followed.
	URL string
	// Secrets sign every request, each one signature in webhook-signature
	// (ParseSecrets reads them from PROVIDER_SECRET). During a rotation both
	// the new and the old secret are here; a provider that knows either
	// verifies the call.
	Secrets []string
	// Timeout bounds one call (DefaultTimeout when zero).
	Timeout time.Duration
	// ConnectTimeout bounds its connect and TLS handshake (DefaultConnectTimeout
	// when zero).
	ConnectTimeout time.Duration
	// MaxIdleConns is how many idle connections to the provider are kept:
	// the relay's workers (OUTBOX_WORKERS), the most calls in flight, so that
	// every call after the first of each worker reuses a kept connection
	// instead of dialling (and leaving one in TIME_WAIT); the relay's default
	// workers (outbox.DefaultWorkers) when zero.
	MaxIdleConns int
}

// ParseSecrets reads PROVIDER_SECRET: one Standard Webhooks secret
// ("whsec_" and the base64 of 24 to 64 random bytes), or several separated by
// spaces during a rotation, each signing every request (the order is kept: the
// stand-in provider verifies with the first). It fails naming PROVIDER_SECRET
// and the position of a secret that is not one, never quoting it.
func ParseSecrets(s string) ([]string, error) {
	secrets := strings.Fields(s)
	if len(secrets) == 0 {
		return nil, errors.New("PROVIDER_SECRET: required but not set (one whsec_ secret, or several separated by spaces)")
	}
	for i, secret := range secrets {
		if err := checkSecret(secret); err != nil {
			return nil, fmt.Errorf("PROVIDER_SECRET: secret %d of %d: %w", i+1, len(secrets), err)
		}
	}
	return secrets, nil
}

// checkSecret tells what is wrong with a secret, without quoting it.
func checkSecret(secret string) error {
	body, ok := strings.CutPrefix(secret, secretPrefix)
	if !ok {
		return errors.New(`does not start with "whsec_"`)
	}
	key, err := base64.StdEncoding.DecodeString(body)
	if err != nil {
		return errors.New(`is not "whsec_" followed by standard base64`)
	}
	if len(key) < minKeyBytes || len(key) > maxKeyBytes {
		return fmt.Errorf("holds %d bytes, want %d to %d (the Standard Webhooks spec's 192 to 512 bits)", len(key), minKeyBytes, maxKeyBytes)
	}
	return nil
}

// Client calls the provider over one pooled http.Client. It is safe for
// concurrent use.
type Client struct {
	http    *http.Client
	url     string
	scrub   wire.Scrubber // hides url's credentials in a quoted answer
	signers []*standardwebhooks.Webhook
	logger  *slog.Logger
	now     func() time.Time
}

// New returns a client for cfg. It fails, naming the variable, when the URL is
// not an absolute http(s) URL (an empty one included: with PROVIDER_URL unset
// the caller builds no client and no relay, and the rows wait) or a secret is
// not one ParseSecrets accepts.
func New(cfg Config, logger *slog.Logger) (*Client, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("PROVIDER_URL: %q is not an absolute http(s) URL", wire.RedactURL(cfg.URL))
	}
	if len(cfg.Secrets) == 0 {
		return nil, errors.New("PROVIDER_SECRET: required but not set")
	}
	signers := make([]*standardwebhooks.Webhook, len(cfg.Secrets))
	for i, secret := range cfg.Secrets {
		if err := checkSecret(secret); err != nil {
			return nil, fmt.Errorf("PROVIDER_SECRET: secret %d of %d: %w", i+1, len(cfg.Secrets), err)
		}
		if signers[i], err = standardwebhooks.NewWebhook(secret); err != nil {
			return nil, fmt.Errorf("PROVIDER_SECRET: secret %d of %d: %w", i+1, len(cfg.Secrets), err)
		}
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.MaxIdleConns <= 0 {
		cfg.MaxIdleConns = outbox.DefaultWorkers
	}
	if logger == nil {
		logger = slog.Default()
	}
	// A transport of its own, sized for the relay, with a bound on every
	// phase even when a caller's context has none.
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = cfg.ConnectTimeout
	t.ResponseHeaderTimeout = cfg.Timeout
	t.MaxIdleConns = cfg.MaxIdleConns
	t.MaxIdleConnsPerHost = cfg.MaxIdleConns
	t.IdleConnTimeout = 90 * time.Second
	t.ExpectContinueTimeout = time.Second
	return &Client{
		http: &http.Client{
			// With tracing on, each call is a client span under the relay's
			// process span.
			Transport: telemetry.Transport(t),
			Timeout:   cfg.Timeout,
			// A redirect is answered, not followed (the spec's advice: following
			// costs both sides, and the URL should be fixed instead); a
			// followed POST could also reach a host no secret was meant for.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		url:     cfg.URL,
		scrub:   wire.NewScrubber(cfg.URL),
		signers: signers,
		logger:  logger.With("component", "webhook"),
		now:     time.Now,
	}, nil
}

// IdempotencyKey is the Idempotency-Key of the call of row id: the row id
// itself, in canonical form. It is the same on every attempt of the row and
// differs between rows (each is a fresh UUIDv7), and it equals webhook-id, so
// a provider that dedups by either header dedups the same way. One row is one
// call: a row that had to make two calls to one provider would need a key of
// its own for each (a UUIDv5 of the row id under a namespace per call), which
// nothing here does.
func IdempotencyKey(id uuid.UUID) string { return id.String() }

// Call POSTs m's envelope to the provider under ctx (the relay's handler
// timeout; the client's own Timeout bounds it too) and returns nil only on a
// 2xx answer. Every other outcome is an error for the relay's settlement:
//
//   - 429 and 5xx: an ordinary failed attempt, retried after the relay's
//     backoff, or after the answer's Retry-After (seconds or an HTTP date)
//     when that is longer (outbox.RetryAfter; at most OUTBOX_RETRY_MAX);
//   - 410 Gone (the provider wants no more calls) and every other 4xx: marked
//     outbox.Permanent, so the row is dead-lettered at once;
//   - 3xx: not followed, a failed attempt whose error names the Location, so
//     the operator fixes PROVIDER_URL while the row waits for its retries;
//   - no answer (refused, timed out, reset): a failed attempt.
//
// The error names the row and quotes the status and the start of the answer
// (at most 256 bytes, on one line), never a secret: a URL it quotes
// (PROVIDER_URL, a Location) is scheme://host/path only (wire.RedactURL), and
// the answer is quoted with PROVIDER_URL's query values and userinfo hidden
// (wire.Scrubber: an error page may echo the request target), so a credential
// there reaches neither last_error nor the log.
func (c *Client) Call(ctx context.Context, m outbox.Message) error {
	body, err := delivery.Envelope(m)
	if err != nil {
		return outbox.Permanent(fmt.Errorf("encode %s %s: %w", m.Tag, m.ID, err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("call provider for %s %s: %w", m.Tag, m.ID, wire.RedactURLs(err))
	}
	id := m.ID.String()
	now := c.now()
	signatures := make([]string, len(c.signers))
	for i, s := range c.signers {
		if signatures[i], err = s.Sign(id, now, body); err != nil {
			return fmt.Errorf("sign %s %s: %w", m.Tag, m.ID, err)
		}
	}
	// Set, not Add: the header names are the spec's, in lowercase, and Go
	// canonicalises them on the wire either way (HTTP header names are
	// case-insensitive).
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", IdempotencyKey(m.ID))
	req.Header.Set(standardwebhooks.HeaderWebhookID, id)
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, strings.Join(signatures, " "))

	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		// Go's text quotes the URL with its query and user name: the error
		// becomes last_error and a WARN line.
		return fmt.Errorf("call provider for %s %s: %w", m.Tag, m.ID, wire.RedactURLs(err))
	}
	defer func() {
		// Read what is left (bounded) so the connection goes back to the pool.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
		_ = resp.Body.Close()
	}()
	status := resp.StatusCode
	if status >= 200 && status < 300 {
		c.logger.DebugContext(ctx, "provider called", "id", m.ID, "tag", m.Tag, "attempt", m.Attempt,
			"status", status, "duration_ms", time.Since(start).Milliseconds())
		return nil
	}
	err = fmt.Errorf("call provider for %s %s: provider answered %s: %s", m.Tag, m.ID, resp.Status, c.scrub.Snippet(resp.Body, snippetBytes))
	switch {
	case status == http.StatusTooManyRequests || status >= 500:
		if d, ok := retryAfter(resp.Header.Get("Retry-After"), c.now()); ok {
			return outbox.RetryAfter(fmt.Errorf("%w (Retry-After %s)", err, d), d)
		}
		return err
	case status >= 400:
		// 410 among them: no retry changes a refusal.
		return outbox.Permanent(err)
	case status >= 300:
		return fmt.Errorf("%w; redirect to %q not followed: set PROVIDER_URL to where the provider receives", err, wire.RedactURL(resp.Header.Get("Location")))
	default:
		return err
	}
}

// Subscriber returns an outbox subscriber of E's tag that calls the provider
// for each row. The payload is decoded into E (and validated, if E has
// Validate) before the call, so a row the provider could not read fails at
// once without a request.
func Subscriber[E outbox.Event](c *Client) outbox.Subscriber {
	return outbox.Subscribe(func(ctx context.Context, m outbox.Message, _ E) error {
		return c.Call(ctx, m)
	})
}

// retryAfter reads a Retry-After header: delay-seconds or an HTTP date
// (RFC 9110 section 10.2.3), as a wait from now; a date in the past is no
// wait. Anything else is ignored (ok false).
func retryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return 0, false
		}
		// Beyond any RetryMax; the relay caps it. Kept from overflowing.
		return time.Duration(min(secs, int64(365*24*time.Hour/time.Second))) * time.Second, true
	}
	if at, err := http.ParseTime(v); err == nil {
		return max(0, at.Sub(now)), true
	}
	return 0, false
}

// Package delivery carries Labeling's outbox events across the process boundary to
// Billing: an outbox subscriber POSTs each event to Billing's /internal/v1/events
// with the row id as the idempotency key. It maps Billing's answer to the relay's
// settlement: 2xx processed, 400 failed at once (no retry can fix the body), and
// anything else, a timeout or a refused connection included, an ordinary failed
// attempt that the relay retries after its durable delay. Billing's receipts make
// the redeliveries this causes harmless.
package delivery

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/infra/wire"
)

// Path is where Billing receives events, relative to its base URL.
const Path = "/internal/v1/events"

const (
	// snippetBytes bounds the part of an error answer quoted in the row's last_error.
	snippetBytes = 256
	// drainBytes bounds what is read from an answer so its connection can be reused;
	// an answer longer than that costs a new connection, not an unbounded read.
	drainBytes = 64 << 10
)

// Config is what the client needs from Labeling's configuration.
type Config struct {
	BaseURL string        // BILLING_URL, e.g. http://localhost:8081
	Token   string        // EVENTS_TOKEN, sent as a Bearer token
	Timeout time.Duration // bound of one delivery (OUTBOX_HANDLER_TIMEOUT); 30s when zero
	// MaxIdleConns is how many idle connections to Billing are kept for reuse: the
	// relay's workers (OUTBOX_WORKERS) are the most that are in flight. 10
	// when zero.
	MaxIdleConns int
	// Name names the consumer in an error's text ("ledger answered 503");
	// "billing" when empty.
	Name string
	// Format (EVENTS_FORMAT) is how each event is written: the envelope of
	// contract section 4 (wire.FormatEnvelope, also when empty) or a
	// CloudEvent in binary content mode (wire.FormatCloudEvents).
	Format wire.Format
}

// Source is the ce-source of the events this package sends: labeling's.
const Source = "/labeling"

// Client delivers events to Billing over one pooled http.Client. It is safe for
// concurrent use.
type Client struct {
	http   *http.Client
	url    string
	scrub  wire.Scrubber // hides url's credentials in a quoted answer
	auth   string
	format wire.Format
	name   string
	logger *slog.Logger
}

// New returns a client for cfg. It fails when the base URL is not an absolute
// http(s) URL or the token is empty.
func New(cfg Config, logger *slog.Logger) (*Client, error) {
	u, err := url.Parse(cfg.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("BILLING_URL: %q is not an http(s) URL", wire.RedactURL(cfg.BaseURL))
	}
	if cfg.Token == "" {
		return nil, errors.New("EVENTS_TOKEN: required but not set")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.MaxIdleConns <= 0 {
		cfg.MaxIdleConns = 10
	}
	// A transport of its own, not http.DefaultTransport: its pool is sized for the
	// relay, and every phase of a request has a bound even if a caller's context
	// has none.
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = cfg.MaxIdleConns
	t.MaxIdleConnsPerHost = cfg.MaxIdleConns
	t.IdleConnTimeout = 90 * time.Second
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = cfg.Timeout
	t.ExpectContinueTimeout = time.Second
	return &Client{
		// With tracing on, each delivery is a client span under the relay's
		// process span and carries its traceparent (telemetry.Transport).
		http: &http.Client{Transport: telemetry.Transport(t), Timeout: cfg.Timeout},
		// Joined, not appended: a query in BILLING_URL stays the query.
		url:    u.JoinPath(Path).String(),
		scrub:  wire.NewScrubber(cfg.BaseURL),
		auth:   "Bearer " + cfg.Token,
		format: cfg.Format,
		name:   cmp.Or(cfg.Name, "billing"),
		logger: logger,
	}, nil
}

// Deliver POSTs m to Billing under ctx (the relay's handler timeout) and returns
// nil only on a 2xx answer, which Billing gives after its commit. A 400, or a
// message that cannot be encoded, is returned wrapped with outbox.Permanent; every
// other outcome is an ordinary error the relay retries. The error quotes the
// status and the start of the answer, never the token, and BILLING_URL only as
// scheme://host/path (wire.RedactURL), the answer with BILLING_URL's query
// values and userinfo hidden (wire.Scrubber): a credential there reaches
// neither last_error nor the log.
func (c *Client) Deliver(ctx context.Context, m outbox.Message) error {
	var body []byte
	var err error
	if c.format == wire.FormatCloudEvents {
		// Binary content mode: the payload is the body, as the row holds it.
		body = m.Payload
	} else if body, err = Envelope(m); err != nil {
		return outbox.Permanent(fmt.Errorf("encode %s %s: %w", m.Tag, m.ID, err))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("deliver %s %s: %w", m.Tag, m.ID, wire.RedactURLs(err))
	}
	req.Header.Set("Authorization", c.auth)
	req.Header.Set("Idempotency-Key", m.ID.String())
	req.Header.Set("Content-Type", wire.ContentTypeJSON)
	if c.format == wire.FormatCloudEvents {
		for _, h := range append(wire.BinaryHeaders(m.ID, m.Tag, Source, m.CreatedAt), TraceAttributes(ctx)...) {
			req.Header.Set(h[0], h[1])
		}
	}

	start := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		// Go's text quotes the URL with its query and user name: the error
		// becomes last_error and a WARN line.
		return fmt.Errorf("deliver %s %s: %w", m.Tag, m.ID, wire.RedactURLs(err))
	}
	defer func() {
		// Read what is left (bounded) so the connection goes back to the pool.
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, drainBytes))
		_ = resp.Body.Close()
	}()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		c.logger.DebugContext(ctx, "event delivered", "id", m.ID, "tag", m.Tag, "attempt", m.Attempt,
			"status", resp.StatusCode, "duration_ms", time.Since(start).Milliseconds())
		return nil
	}
	err = fmt.Errorf("deliver %s %s: %s answered %s: %s", m.Tag, m.ID, c.name, resp.Status, c.scrub.Snippet(resp.Body, snippetBytes))
	if resp.StatusCode == http.StatusBadRequest {
		return outbox.Permanent(err)
	}
	return err
}

// Subscriber returns an outbox subscriber of E's tag that delivers each row to
// Billing. The payload is decoded into E (and validated, if E has Validate) before
// it is sent, so a payload Billing would refuse fails the row at once without a
// request.
func Subscriber[E outbox.Event](c *Client) outbox.Subscriber {
	return outbox.Subscribe(func(ctx context.Context, m outbox.Message, _ E) error {
		return c.Deliver(ctx, m)
	})
}

// Envelope encodes m as the delivery body of contract section 4,
// {"id","type","occurredAt","payload"}: what Billing's HTTP intake takes, and the
// body of a JetStream message (infra/stream), so both transports carry one format:
// wire.Envelope, the type the inbox decodes.
func Envelope(m outbox.Message) ([]byte, error) {
	return wire.New(m.ID, m.Tag, m.CreatedAt, m.Payload).Encode()
}

// TraceAttributes is the distributed-tracing extension of a CloudEvent sent
// under ctx: ce-traceparent and ce-tracestate of ctx's span (the relay's
// process span, whose trace the delivery's own traceparent header continues
// too), none when ctx holds no span, as with tracing off.
func TraceAttributes(ctx context.Context) [][2]string {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	telemetry.Propagator.Inject(ctx, carrier)
	var out [][2]string
	for _, k := range []string{"traceparent", "tracestate"} {
		if v := carrier[k]; v != "" {
			out = append(out, [2]string{wire.HeaderPrefix + k, wire.Encode(v)})
		}
	}
	return out
}

// Package stream is the NATS JetStream transport of the outbox (contract section
// 7), the scale path beside infra/delivery's HTTP push. Labeling's relay publishes
// each outbox row to the stream LABELING_EVENTS on labeling.events.<EventTag>, with
// the row id as Nats-Msg-Id and an Events-Signature (Sign), and settles the row
// only after the publish ack: the broker stores the message durably and drops a
// republish of the same id within its duplicate window. Once settled, the row is
// deleted at the outbox's retention, so the stream keeps each message until every
// durable consumer has acked or terminated it (interest retention), never by age.
// Consumers (Billing first, any other team beside it) read the stream with
// durable pull consumers and explicit acks, verify the signature (Verify), and
// ack only after their own commit; a redelivery is theirs to absorb, by a receipt.
// Each durable filters the subjects of the types its consumer handles (Filter),
// so the stream neither delivers nor keeps for it a type it does not handle.
//
// Neither side needs NATS at start-up: connections retry for ever in the
// background, the stream and the consumers are created or updated by background
// loops that retry until the server answers, and meanwhile the services serve
// their HTTP APIs and the rows wait in the outbox.
package stream

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/outboxpair/infra/wire"
)

// The stream's names (contract section 7).
const (
	// Name is the stream Labeling creates and every consumer reads.
	Name = "LABELING_EVENTS"
	// SubjectPrefix prefixes every event's tag: labeling.events.RuleActivated.
	SubjectPrefix = "labeling.events."
	// Subjects is the filter that matches every event of the stream.
	Subjects = SubjectPrefix + ">"
)

// Subject is the subject an event of tag is published on.
func Subject(tag string) string { return SubjectPrefix + tag }

// Bounds of the background retries (stream and consumer creation, fetch errors):
// the first retry comes quickly, later ones at most every retryMax.
const (
	retryBase = 250 * time.Millisecond
	retryMax  = 5 * time.Second
)

// ConnectConfig is how a service authenticates to the servers of its URL.
// Credentials in the URL (nats://user:password@host or nats://token@host) are
// nats.go's own and need nothing here; a tls:// URL makes the connection TLS,
// verified against the system's roots (SSL_CERT_FILE names another bundle).
type ConnectConfig struct {
	URL   string // NATS_URL; several servers separated by commas
	Creds string // NATS_CREDS: a credentials file (user JWT and nkey seed), or empty
}

// connect opens a connection that never gives up: the first attempt failing is
// not an error (it keeps retrying in the background), reconnects are unlimited,
// and nothing is buffered while disconnected, so a publish then fails at once
// and its row is retried by the relay instead of waiting in a client buffer.
// A credentials file is read and checked here, so a bad one stops start-up
// instead of failing every reconnect in the background. Replies come to
// _INBOX_<name>.>, so a server's permissions can give each service its own.
func connect(cc ConnectConfig, name string, logger *slog.Logger) (*nats.Conn, error) {
	var failed throttle
	opts := []nats.Option{
		nats.Name(name),
		nats.CustomInboxPrefix(InboxPrefix(name)),
		nats.RetryOnFailedConnect(true),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
		nats.ReconnectBufSize(-1),
		nats.Timeout(2 * time.Second),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			logger.Warn("nats disconnected", "err", errText(err))
		}),
		nats.ReconnectHandler(func(nc *nats.Conn) {
			logger.Info("nats connected", "server", wire.RedactURL(nc.ConnectedUrl()))
		}),
		nats.ConnectHandler(func(nc *nats.Conn) {
			logger.Info("nats connected", "server", wire.RedactURL(nc.ConnectedUrl()))
		}),
		nats.ReconnectErrHandler(func(_ *nats.Conn, err error) {
			// A wrong password, an untrusted certificate or a server that is
			// down look alike from the outside: say which, without flooding the
			// log on every attempt.
			if failed.Every(30 * time.Second) {
				logger.Warn("nats connect failed, retrying in the background", "err", errText(err))
			}
		}),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			// Permission violations arrive here: a server's configuration refusing
			// what this service needs is an operator's to fix, and must be visible.
			logger.Error("nats error", "err", errText(err))
		}),
	}
	if cc.Creds != "" {
		if err := checkCreds(cc.Creds); err != nil {
			return nil, fmt.Errorf("NATS_CREDS: %w", err)
		}
		opts = append(opts, nats.UserCredentials(cc.Creds))
	}
	nc, err := nats.Connect(cc.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("NATS_URL: %w", err)
	}
	return nc, nil
}

// throttle says yes at most once an interval.
type throttle struct {
	mu   sync.Mutex
	last time.Time
}

// Every reports whether d has passed since it last said yes.
func (t *throttle) Every(d time.Duration) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if now := time.Now(); t.last.IsZero() || now.Sub(t.last) >= d {
		t.last = now
		return true
	}
	return false
}

// InboxPrefix is the prefix of the reply subjects of a connection named name
// ("labeling", or a consumer's durable): a server's permissions let each user
// subscribe to its own replies only.
func InboxPrefix(name string) string { return "_INBOX_" + name }

// checkCreds reads a credentials file as nats.go will on every connect, so a
// missing or malformed file is refused at start.
func checkCreds(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if jwt, err := nkeys.ParseDecoratedJWT(b); err != nil || strings.Count(jwt, ".") != 2 {
		return fmt.Errorf("%s: no user JWT", path)
	}
	kp, err := nkeys.ParseDecoratedUserNKey(b)
	if err != nil {
		return fmt.Errorf("%s: no nkey seed: %w", path, err)
	}
	kp.Wipe()
	return nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// backoff is the wait before retry n (1-based) of a background loop: doubling
// from retryBase, jittered, capped at retryMax.
func backoff(n int) time.Duration {
	d := retryBase << min(n-1, 10)
	d = min(d, retryMax)
	return d/2 + rand.N(d/2+1)
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Outcomes of nats_publishes_total.
const (
	PublishStored    = "stored"    // the broker stored the message
	PublishDuplicate = "duplicate" // the broker had it already (Nats-Msg-Id in its window): absorbed
	PublishFailed    = "failed"    // no ack: the row is retried
)

// Outcomes of nats_consumed_total.
const (
	ConsumeAcked      = "acked"      // handled and acked
	ConsumeNaked      = "naked"      // a transient failure: redelivered after a delay
	ConsumeTerminated = "terminated" // no retry can help: recorded by the handler, never redelivered
	ConsumeSkipped    = "skipped"    // a type the consumer does not handle, its durable taking it anyway: acked unhandled
)

var (
	publishes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nats_publishes_total",
		Help: "JetStream publishes of outbox rows, by outcome (stored, duplicate: absorbed by the broker's duplicate window, failed).",
	}, []string{"outcome"})
	consumed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nats_consumed_total",
		Help: "JetStream messages handled by a durable consumer, by consumer and outcome (acked, naked, terminated, skipped: a type it does not handle, acked unhandled).",
	}, []string{"consumer", "outcome"})
)

func init() { prometheus.MustRegister(publishes, consumed) }

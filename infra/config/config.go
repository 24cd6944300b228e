// Package config reads each service's settings from environment variables, the
// only configuration source (contract section 1). A bad or missing value is an
// error naming the variable, so the process stops at start with a one-line message.
package config

import (
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Lookup reads one variable; os.LookupEnv fits.
type Lookup func(name string) (string, bool)

// Labeling is the configuration of the labeling service.
type Labeling struct {
	DatabaseURL string
	HTTPAddr    string
	EventsToken string
	BillingURL  string

	PollInterval       time.Duration
	ClaimSize          int
	HandlerTimeout     time.Duration
	Lease              time.Duration
	MaxAttempts        int
	RetryBase          time.Duration
	RetryMax           time.Duration
	ProcessedRetention time.Duration
	CleanupInterval    time.Duration

	// EventsTransport is TransportHTTP (the relay POSTs to BillingURL) or
	// TransportNATS (it publishes to JetStream at NATSURL).
	EventsTransport     string
	NATSURL             string
	NATSReplicas        int
	NATSDuplicateWindow time.Duration
}

// Values of EVENTS_TRANSPORT.
const (
	TransportHTTP = "http"
	TransportNATS = "nats"
)

// Billing is the configuration of the billing service.
type Billing struct {
	DatabaseURL       string
	HTTPAddr          string
	EventsToken       string
	ReceiptsRetention time.Duration
	CleanupInterval   time.Duration

	// NATSURL, when set, makes billing also consume the stream LABELING_EVENTS;
	// an unacked delivery is redelivered after NATSAckWait.
	NATSURL     string
	NATSAckWait time.Duration
}

// LabelingVars and BillingVars name every variable each service reads.
var (
	LabelingVars = []string{
		"DATABASE_URL", "HTTP_ADDR", "EVENTS_TOKEN", "BILLING_URL",
		"OUTBOX_POLL_INTERVAL", "OUTBOX_CLAIM_SIZE", "OUTBOX_HANDLER_TIMEOUT", "OUTBOX_LEASE",
		"OUTBOX_MAX_ATTEMPTS", "OUTBOX_RETRY_BASE", "OUTBOX_RETRY_MAX",
		"OUTBOX_PROCESSED_RETENTION", "CLEANUP_INTERVAL",
		"EVENTS_TRANSPORT", "NATS_URL", "NATS_REPLICAS", "NATS_DUPLICATE_WINDOW",
	}
	BillingVars = []string{
		"DATABASE_URL", "HTTP_ADDR", "EVENTS_TOKEN", "RECEIPTS_RETENTION", "CLEANUP_INTERVAL",
		"NATS_URL", "NATS_ACK_WAIT",
	}
	// Required names the variables that have no default.
	Required = []string{"DATABASE_URL", "EVENTS_TOKEN"}
)

// LoadLabeling reads the labeling configuration.
func LoadLabeling(lookup Lookup) (Labeling, error) {
	r := reader{lookup: lookup}
	c := Labeling{
		DatabaseURL:        r.databaseURL(),
		HTTPAddr:           r.str("HTTP_ADDR", ":8080"),
		EventsToken:        r.required("EVENTS_TOKEN"),
		BillingURL:         r.httpURL("BILLING_URL", "http://localhost:8081"),
		PollInterval:       r.duration("OUTBOX_POLL_INTERVAL", time.Second),
		ClaimSize:          r.positiveInt("OUTBOX_CLAIM_SIZE", 10),
		HandlerTimeout:     r.duration("OUTBOX_HANDLER_TIMEOUT", 30*time.Second),
		Lease:              r.duration("OUTBOX_LEASE", 5*time.Minute),
		MaxAttempts:        r.positiveInt("OUTBOX_MAX_ATTEMPTS", 10),
		RetryBase:          r.duration("OUTBOX_RETRY_BASE", 5*time.Second),
		RetryMax:           r.duration("OUTBOX_RETRY_MAX", 15*time.Minute),
		ProcessedRetention: r.duration("OUTBOX_PROCESSED_RETENTION", 168*time.Hour),
		CleanupInterval:    r.duration("CLEANUP_INTERVAL", time.Hour),

		EventsTransport:     r.oneOf("EVENTS_TRANSPORT", TransportHTTP, TransportHTTP, TransportNATS),
		NATSURL:             r.natsURL("NATS_URL"),
		NATSReplicas:        r.positiveInt("NATS_REPLICAS", 1),
		NATSDuplicateWindow: r.duration("NATS_DUPLICATE_WINDOW", DefaultDuplicateWindow),
	}
	if r.err == nil && c.EventsTransport == TransportNATS && c.NATSURL == "" {
		r.fail("NATS_URL", "required with EVENTS_TRANSPORT=nats")
	}
	if r.err == nil && c.NATSReplicas > 5 {
		r.fail("NATS_REPLICAS", "%d is more than JetStream's 5", c.NATSReplicas)
	}
	if r.err == nil && c.NATSDuplicateWindow > c.ProcessedRetention {
		r.fail("NATS_DUPLICATE_WINDOW", "%s is longer than OUTBOX_PROCESSED_RETENTION (%s), which is how long the stream keeps messages",
			c.NATSDuplicateWindow, c.ProcessedRetention)
	}
	if r.err == nil && c.RetryMax < c.RetryBase {
		r.fail("OUTBOX_RETRY_MAX", "%s is less than OUTBOX_RETRY_BASE (%s)", c.RetryMax, c.RetryBase)
	}
	if r.err == nil && time.Duration(c.ClaimSize)*c.HandlerTimeout > c.Lease {
		r.fail("OUTBOX_LEASE", "%s is shorter than OUTBOX_CLAIM_SIZE × OUTBOX_HANDLER_TIMEOUT (%d × %s = %s)",
			c.Lease, c.ClaimSize, c.HandlerTimeout, time.Duration(c.ClaimSize)*c.HandlerTimeout)
	}
	return c, r.err
}

// LoadBilling reads the billing configuration.
func LoadBilling(lookup Lookup) (Billing, error) {
	r := reader{lookup: lookup}
	c := Billing{
		DatabaseURL:       r.databaseURL(),
		HTTPAddr:          r.str("HTTP_ADDR", ":8081"),
		EventsToken:       r.required("EVENTS_TOKEN"),
		ReceiptsRetention: r.duration("RECEIPTS_RETENTION", 720*time.Hour),
		CleanupInterval:   r.duration("CLEANUP_INTERVAL", time.Hour),
		NATSURL:           r.natsURL("NATS_URL"),
		NATSAckWait:       r.duration("NATS_ACK_WAIT", 30*time.Second),
	}
	return c, r.err
}

// DefaultDuplicateWindow is NATS_DUPLICATE_WINDOW's default: longer than the
// lease (5m) plus the longest retry delay (15m) plus a handler timeout (30s) of
// the relay's defaults, the longest a row can wait before it is published again
// after a publish whose ack was lost or whose settle never happened.
const DefaultDuplicateWindow = 30 * time.Minute

// reader keeps the first error, so a caller reads every field and checks once.
type reader struct {
	lookup Lookup
	err    error
}

func (r *reader) fail(name, format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
	}
}

func (r *reader) str(name, def string) string {
	if v, ok := r.lookup(name); ok && v != "" {
		return v
	}
	return def
}

func (r *reader) required(name string) string {
	v := r.str(name, "")
	if v == "" {
		r.fail(name, "required but not set")
	}
	return v
}

func (r *reader) databaseURL() string {
	v := r.required("DATABASE_URL")
	if v == "" {
		return v
	}
	if _, err := pgxpool.ParseConfig(v); err != nil {
		// The parse error may echo the password: name the variable only.
		r.fail("DATABASE_URL", "not a valid PostgreSQL connection string")
	}
	return v
}

func (r *reader) httpURL(name, def string) string {
	v := r.str(name, def)
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.fail(name, "%q is not an http(s) URL", v)
	}
	return v
}

func (r *reader) oneOf(name, def string, allowed ...string) string {
	v := r.str(name, def)
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	r.fail(name, "%q is not one of %s", v, strings.Join(allowed, ", "))
	return def
}

// natsURL reads a NATS server list: one URL or several separated by commas,
// each nats://, tls://, ws:// or wss:// with a host.
func (r *reader) natsURL(name string) string {
	v := r.str(name, "")
	if v == "" {
		return v
	}
	for _, part := range strings.Split(v, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss") {
			// The URL may carry credentials: name the variable only.
			r.fail(name, "not a list of nats:// (or tls://, ws://, wss://) URLs separated by commas")
			return ""
		}
	}
	return v
}

func (r *reader) duration(name string, def time.Duration) time.Duration {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		r.fail(name, "%q is not a duration (use Go syntax: 250ms, 30s, 5m)", v)
		return def
	}
	if d <= 0 {
		r.fail(name, "%q must be positive", v)
	}
	return d
}

func (r *reader) positiveInt(name string, def int) int {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		r.fail(name, "%q is not a positive integer", v)
		return def
	}
	return n
}

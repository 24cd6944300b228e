// Package config reads each service's settings from environment variables, the
// only configuration source (contract section 1). A bad or missing value is an
// error naming the variable, so the process stops at start with a one-line message.
package config

import (
	"fmt"
	"net/url"
	"strconv"
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
	OutboxNotify       bool // OUTBOX_NOTIFY: the relay LISTENs for appends of other replicas
	CleanupInterval    time.Duration
}

// Billing is the configuration of the billing service.
type Billing struct {
	DatabaseURL       string
	HTTPAddr          string
	EventsToken       string
	ReceiptsRetention time.Duration
	CleanupInterval   time.Duration
}

// LabelingVars and BillingVars name every variable each service reads.
var (
	LabelingVars = []string{
		"DATABASE_URL", "HTTP_ADDR", "EVENTS_TOKEN", "BILLING_URL",
		"OUTBOX_POLL_INTERVAL", "OUTBOX_CLAIM_SIZE", "OUTBOX_HANDLER_TIMEOUT", "OUTBOX_LEASE",
		"OUTBOX_MAX_ATTEMPTS", "OUTBOX_RETRY_BASE", "OUTBOX_RETRY_MAX",
		"OUTBOX_PROCESSED_RETENTION", "OUTBOX_NOTIFY", "CLEANUP_INTERVAL",
	}
	BillingVars = []string{
		"DATABASE_URL", "HTTP_ADDR", "EVENTS_TOKEN", "RECEIPTS_RETENTION", "CLEANUP_INTERVAL",
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
		OutboxNotify:       r.boolean("OUTBOX_NOTIFY", true),
		CleanupInterval:    r.duration("CLEANUP_INTERVAL", time.Hour),
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
	}
	return c, r.err
}

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

func (r *reader) boolean(name string, def bool) bool {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, "%q is not a boolean (true or false)", v)
		return def
	}
	return b
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

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
		"OUTBOX_PROCESSED_RETENTION", "CLEANUP_INTERVAL",
		"AUTH_JWKS_URL", "AUTH_ISSUER", "AUTH_AUDIENCE", "AUTH_DISABLED",
	}
	BillingVars = []string{
		"DATABASE_URL", "HTTP_ADDR", "EVENTS_TOKEN", "RECEIPTS_RETENTION", "CLEANUP_INTERVAL",
		"AUTH_JWKS_URL", "AUTH_ISSUER", "AUTH_AUDIENCE", "AUTH_DISABLED",
	}
	// AuthVars names the variables LoadAuth reads; both services read them, and
	// only serve does (the operator commands need none of them).
	AuthVars = []string{"AUTH_JWKS_URL", "AUTH_ISSUER", "AUTH_AUDIENCE", "AUTH_DISABLED"}
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

// Auth is the authentication of the public API (contract section 8), read by
// serve only. Either Disabled is true, or JWKSURL, Issuer and Audience are all set.
type Auth struct {
	Disabled bool   // AUTH_DISABLED=true: /v1 is served without authentication
	JWKSURL  string // where the issuer's signing keys are fetched from
	Issuer   string // the iss every token must carry, exactly
	Audience string // a value the token's aud must contain
}

// LoadAuth reads the authentication settings. It fails, naming the variables,
// unless either AUTH_DISABLED=true or AUTH_JWKS_URL with AUTH_ISSUER and
// AUTH_AUDIENCE is set: an unset variable must never leave the API open.
func LoadAuth(lookup Lookup) (Auth, error) {
	r := reader{lookup: lookup}
	c := Auth{Disabled: r.boolean("AUTH_DISABLED")}
	jwks := r.str("AUTH_JWKS_URL", "")
	switch {
	case r.err != nil:
	case c.Disabled && jwks != "":
		r.fail("AUTH_DISABLED", "true while AUTH_JWKS_URL is set; unset one of them")
	case c.Disabled:
	case jwks == "":
		r.fail("AUTH_JWKS_URL", "required (with AUTH_ISSUER and AUTH_AUDIENCE) unless AUTH_DISABLED=true")
	default:
		c.JWKSURL = r.httpURL("AUTH_JWKS_URL", "")
		c.Issuer = r.required("AUTH_ISSUER")
		c.Audience = r.required("AUTH_AUDIENCE")
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

func (r *reader) boolean(name string) bool {
	v := r.str(name, "")
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.fail(name, "%q is not true or false", v)
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

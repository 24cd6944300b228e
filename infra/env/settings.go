package env

import (
	"time"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/web"
)

// The settings both services read alike, each with its component's default
// and bound.

// MaxDuration (ten years) bounds a duration no component bounds; MaxCount a
// number no component bounds, read within it before the component's own
// rule (stream.MaxReplicas) names the component's limit.
const (
	MaxDuration = 10 * 365 * 24 * time.Hour
	MaxCount    = 1000
)

// Relay reads the OUTBOX_* variables: the relay's settings, the same for
// labeling's relay and billing's (and the benchmark's in-process relays),
// with outbox's defaults and bounds, and then the rules between them that
// outbox.Config.Validate holds (OUTBOX_RETRY_MAX at least OUTBOX_RETRY_BASE,
// OUTBOX_LEASE at least outbox.MinLease and at least OUTBOX_HANDLER_TIMEOUT),
// each refusal naming the variable to change.
func (r *Reader) Relay() outbox.Config {
	c := outbox.Config{
		PollInterval:       r.Duration("OUTBOX_POLL_INTERVAL", outbox.DefaultPollInterval, outbox.MaxShortDuration),
		ClaimSize:          r.PositiveInt("OUTBOX_CLAIM_SIZE", outbox.DefaultClaimSize, outbox.MaxClaimSize),
		Workers:            r.PositiveInt("OUTBOX_WORKERS", outbox.DefaultWorkers, outbox.MaxClaimSize),
		HandlerTimeout:     r.Duration("OUTBOX_HANDLER_TIMEOUT", outbox.DefaultHandlerTimeout, outbox.MaxShortDuration),
		Lease:              r.Duration("OUTBOX_LEASE", outbox.DefaultLease, outbox.MaxLongDuration),
		MaxAttempts:        r.PositiveInt("OUTBOX_MAX_ATTEMPTS", outbox.DefaultMaxAttempts, outbox.MaxAttempts),
		RetryBase:          r.Duration("OUTBOX_RETRY_BASE", outbox.DefaultRetryBase, outbox.MaxShortDuration),
		RetryMax:           r.Duration("OUTBOX_RETRY_MAX", outbox.DefaultRetryMax, outbox.MaxLongDuration),
		ProcessedRetention: r.Duration("OUTBOX_PROCESSED_RETENTION", outbox.DefaultProcessedRetention, outbox.MaxLongDuration),
		Notify:             r.Bool("OUTBOX_NOTIFY", outbox.DefaultNotify),
	}
	switch {
	case c.RetryMax < c.RetryBase:
		r.Fail("OUTBOX_RETRY_MAX", "%s is less than OUTBOX_RETRY_BASE (%s)", c.RetryMax, c.RetryBase)
	case c.Lease < outbox.MinLease:
		r.Fail("OUTBOX_LEASE", "%s is less than the minimum of %s (a fifth of the lease is kept for recording each outcome)",
			c.Lease, outbox.MinLease)
	case c.HandlerTimeout > c.Lease:
		r.Fail("OUTBOX_LEASE", "%s is shorter than OUTBOX_HANDLER_TIMEOUT (%s): a claim takes no more rows than OUTBOX_WORKERS has free, so each claimed row starts at once and must finish within the lease",
			c.Lease, c.HandlerTimeout)
	}
	return c
}

// Bounds reads the DB_* bounds of a service's pool.
func (r *Reader) Bounds() sqldb.Bounds {
	return sqldb.Bounds{
		StatementTimeout: r.Duration("DB_STATEMENT_TIMEOUT", sqldb.DefaultStatementTimeout, sqldb.MaxTimeout),
		LockTimeout:      r.Duration("DB_LOCK_TIMEOUT", sqldb.DefaultLockTimeout, sqldb.MaxTimeout),
	}
}

// Web reads the server's settings: HTTP_ADDR (def when unset),
// HTTP_REQUEST_TIMEOUT (at most web.MaxRequestTimeout, so the stop budget
// stays under 30 s) and CONSOLE_SECURE_COOKIES (false when unset: only a
// request over TLS gets Secure cookies).
func (r *Reader) Web(def string) web.Config {
	return web.Config{
		Addr:           r.Str("HTTP_ADDR", def),
		RequestTimeout: r.Duration("HTTP_REQUEST_TIMEOUT", web.DefaultRequestTimeout, web.MaxRequestTimeout),
		SecureCookies:  r.Bool("CONSOLE_SECURE_COOKIES", false),
	}
}

// Cleanup reads CLEANUP_INTERVAL.
func (r *Reader) Cleanup() retention.Config {
	return retention.Config{Interval: r.Duration("CLEANUP_INTERVAL", retention.DefaultInterval, MaxDuration)}
}

// Command is what an operator command (migrate, outbox ...) needs: no delivery
// secret, since such a command never delivers.
type Command struct {
	DatabaseURL string
	// DatabaseDefaulted is true when DATABASE_URL was unset and DatabaseURL is
	// the service's default SQLite file.
	DatabaseDefaulted bool
	sqldb.Bounds
}

// LoadCommand reads what an operator command needs, and only that (contract
// section 1): DATABASE_URL (def when unset: the service's SQLite file) and
// the DB_* bounds; never EVENTS_TOKEN, nor HTTP_REQUEST_TIMEOUT, so a setting
// meant for serve cannot stop a migration or a requeue.
func LoadCommand(lookup Lookup, def string) (Command, error) {
	r := New(lookup)
	c := Command{Bounds: r.Bounds()}
	c.DatabaseURL, c.DatabaseDefaulted = r.DatabaseURL(def)
	return c, r.Err()
}

// LoopbackHost is the host serve listens on when HTTP_ADDR is unset and
// AUTH_DISABLED=true (contract section 1): an open /v1 is reachable from this
// machine only unless HTTP_ADDR says otherwise.
const LoopbackHost = "127.0.0.1"

// ServeAddr is serve's listen address: HTTP_ADDR when set, else def (":8080",
// ":8081"), on LoopbackHost when authentication is off.
func ServeAddr(lookup Lookup, def string, authDisabled bool) string {
	if addr := New(lookup).Str("HTTP_ADDR", ""); addr != "" {
		return addr
	}
	if authDisabled {
		return LoopbackHost + def
	}
	return def
}

// LoadHTTPAddr reads HTTP_ADDR alone (def when unset), for the healthcheck
// command.
func LoadHTTPAddr(lookup Lookup, def string) string { return New(lookup).Str("HTTP_ADDR", def) }

// Auth is the authentication of the public API (contract section 8), read by
// serve only. Either Disabled is true, or JWKSURL, Issuer and Audience are all set.
type Auth struct {
	Disabled bool   // AUTH_DISABLED=true: /v1 is served without authentication
	JWKSURL  string // where the issuer's signing keys are fetched from
	Issuer   string // the iss every token must carry, exactly
	Audience string // a value the token's aud must contain
}

// Settings is a as infra/auth takes it.
func (a Auth) Settings() auth.Settings {
	return auth.Settings{Disabled: a.Disabled, Config: auth.Config{JWKSURL: a.JWKSURL, Issuer: a.Issuer, Audience: a.Audience}}
}

// LoadAuth reads the authentication settings. It fails, naming the variables,
// unless either AUTH_DISABLED=true or AUTH_JWKS_URL with AUTH_ISSUER and
// AUTH_AUDIENCE is set: an unset variable must never leave the API open.
func LoadAuth(lookup Lookup) (Auth, error) {
	r := New(lookup)
	c := Auth{Disabled: r.Bool("AUTH_DISABLED", false)}
	jwks := r.Str("AUTH_JWKS_URL", "")
	switch {
	case r.err != nil:
	case c.Disabled && jwks != "":
		r.Fail("AUTH_DISABLED", "true while AUTH_JWKS_URL is set; unset one of them")
	case c.Disabled:
	case jwks == "":
		r.Fail("AUTH_JWKS_URL", "required (with AUTH_ISSUER and AUTH_AUDIENCE) unless AUTH_DISABLED=true")
	default:
		c.JWKSURL = r.HTTPURL("AUTH_JWKS_URL", "")
		c.Issuer = r.Required("AUTH_ISSUER")
		c.Audience = r.Required("AUTH_AUDIENCE")
	}
	return c, r.Err()
}

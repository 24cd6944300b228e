// Package config reads each service's settings from environment variables, the
// only configuration source (contract section 1). A bad or missing value is an
// error naming the variable, so the process stops at start with a one-line message.
package config

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/sqldb"
)

// Lookup reads one variable; os.LookupEnv fits.
type Lookup func(name string) (string, bool)

// Labeling is the configuration of the labeling service.
type Labeling struct {
	DatabaseURL string
	// DatabaseDefaulted: DATABASE_URL was unset (DatabaseURL is the default
	// SQLite file), for the start-up's log line.
	DatabaseDefaulted bool
	HTTPAddr          string
	EventsToken       string
	BillingURL        string
	// ConsoleBillingURL (CONSOLE_BILLING_URL) is the link from labeling's
	// console to billing's, or empty; ConsoleTraceURL (CONSOLE_TRACE_URL) a
	// trace viewer's URL with {trace} for a row's trace id, or empty.
	ConsoleBillingURL string
	ConsoleTraceURL   string

	PollInterval       time.Duration
	ClaimSize          int
	Workers            int // OUTBOX_WORKERS: rows in flight at once per relay
	HandlerTimeout     time.Duration
	Lease              time.Duration
	MaxAttempts        int
	RetryBase          time.Duration
	RetryMax           time.Duration
	ProcessedRetention time.Duration
	OutboxNotify       bool // OUTBOX_NOTIFY: the relay LISTENs for appends of other replicas
	CleanupInterval    time.Duration

	// EventsTransport is TransportHTTP (the relay POSTs to BillingURL) or
	// TransportNATS (it publishes to JetStream at NATSURL).
	EventsTransport     string
	NATSURL             string
	NATSReplicas        int
	NATSDuplicateWindow time.Duration
	// NATSCreds (NATS_CREDS) is a credentials file, or empty; NATSConsumers
	// (NATS_CONSUMERS) the durables the stream keeps every message for.
	NATSCreds     string
	NATSConsumers []string

	Bounds
}

// Values of EVENTS_TRANSPORT.
const (
	TransportHTTP = "http"
	TransportNATS = "nats"
)

// Billing is the configuration of the billing service.
type Billing struct {
	DatabaseURL       string
	DatabaseDefaulted bool // DATABASE_URL was unset, DatabaseURL is the default SQLite file
	HTTPAddr          string
	EventsToken       string
	// EventsTokenPrevious (EVENTS_TOKEN_PREVIOUS), when set, is accepted beside
	// EventsToken on both intakes: the old token during a rotation.
	EventsTokenPrevious string
	ReceiptsRetention   time.Duration
	CleanupInterval     time.Duration

	// NATSURL, when set, makes billing also consume the stream LABELING_EVENTS;
	// an unacked delivery is redelivered after NATSAckWait.
	NATSURL     string
	NATSAckWait time.Duration
	// NATSCreds (NATS_CREDS) is a credentials file, or empty. A message that
	// keeps failing is recorded and terminated at delivery NATSMaxDeliveries.
	NATSCreds         string
	NATSMaxDeliveries int
	// NATSFailedMaxRows and NATSFailedMaxBytes (NATS_FAILED_MAX_ROWS,
	// NATS_FAILED_MAX_BYTES) bound billing_nats_failed: past either, records
	// whose signature fails under the current keys are dropped, oldest first.
	NATSFailedMaxRows  int
	NATSFailedMaxBytes int

	// ApplyGroupMax (BILLING_APPLY_GROUP_MAX) bounds the deliveries billing
	// applies in one transaction; 1 is one transaction per event.
	ApplyGroupMax int

	// ConsoleLabelingURL (CONSOLE_LABELING_URL) is the link from billing's
	// console to labeling's, or empty.
	ConsoleLabelingURL string

	Bounds
}

// Bounds limit how long one piece of work may hold a request or a database
// connection; both services read them.
type Bounds struct {
	// RequestTimeout is the deadline of every HTTP request (HTTP_REQUEST_TIMEOUT).
	RequestTimeout time.Duration
	// StatementTimeout and LockTimeout are PostgreSQL's statement_timeout and
	// lock_timeout on every pooled connection (DB_STATEMENT_TIMEOUT, DB_LOCK_TIMEOUT).
	StatementTimeout time.Duration
	LockTimeout      time.Duration
}

// Command is what an operator command (migrate, outbox ...) needs: no delivery
// secret, since such a command never delivers.
type Command struct {
	DatabaseURL string
	// DatabaseDefaulted is true when DATABASE_URL was unset and DatabaseURL is
	// the service's default SQLite file.
	DatabaseDefaulted bool
	Bounds
}

// Defaults and upper bounds. An upper bound keeps an absurd value (a typo, an extra
// digit) from starting a process that misbehaves later: every bound is far above
// any sensible setting.
const (
	DefaultRequestTimeout   = 8 * time.Second
	DefaultStatementTimeout = 5 * time.Second
	DefaultLockTimeout      = 2 * time.Second

	// MaxRequestTimeout keeps the stop budget under an orchestrator's 30 s
	// (service.StopGrace): the HTTP drain's share is this plus 2 s, the other
	// shares take 12 s, so 15 s makes a 29 s stop.
	MaxRequestTimeout = 15 * time.Second
	MaxClaimSize      = 1000
	// DefaultWorkers is OUTBOX_WORKERS's default: rows in flight per relay. Billing
	// commits once per event, so its throughput grows with the deliveries it is
	// given at once (group commit); 40 keeps its pool busy with room to spare.
	DefaultWorkers = 40
	// DefaultClaimSize is OUTBOX_CLAIM_SIZE's default, OUTBOX_WORKERS's: a claim
	// never takes more rows than the relay has free workers, so a larger claim
	// size changes nothing at the default workers, and with this one a relay
	// whose workers are all free fills them in one statement. It was 10 until
	// issue 20, when the lease rule was claim size × handler timeout ≤ lease.
	DefaultClaimSize  = DefaultWorkers
	MaxAttempts       = 1000
	maxDuration       = 10 * 365 * 24 * time.Hour // ten years: any duration setting
	maxDBTimeout      = time.Hour
	maxOutboxDuration = 24 * time.Hour // poll interval, handler timeout, retry base
)

// DefaultApplyGroupMax is BILLING_APPLY_GROUP_MAX's default, above the
// deliveries one relay keeps in flight (OUTBOX_WORKERS), so that a relay's
// concurrent deliveries fit one transaction; MaxApplyGroup bounds the setting.
const (
	DefaultApplyGroupMax = 100
	MaxApplyGroup        = 1000
)

// The lease rule. A claimed row must be done with (dispatched and settled)
// before its claim's lease runs out, or another relay takes it and it is
// delivered twice. Each row in flight finishes within OUTBOX_HANDLER_TIMEOUT
// T (the relay cuts it off then), once a worker takes it. With W workers
// running a claim of C rows one after another, the last row of the claim
// would start after ceil(C/W) − 1 timeouts at worst and finish by
// ceil(C/W) × T. The relay never claims more rows than it has free workers
// (C ≤ free ≤ W), so ceil(C/W) = 1: every row of a claim starts when the
// claim returns, and the lease must cover one timeout, T ≤ OUTBOX_LEASE,
// whatever OUTBOX_CLAIM_SIZE is. (The rule this replaces, claim size × T ≤
// lease, assumed the rows of a claim ran one after another, and made a claim
// of more than 10 rows illegal at the default timeout.) The relay keeps a
// fifth of each lease for the claim and the settle on top (outbox.LeaseMargin):
// a dispatch is cut off at four fifths of the lease if T is longer.

// MinLease is OUTBOX_LEASE's least value. The relay keeps a fifth of every
// lease for recording each row's outcome; below 200ms a settle on a busy
// database may land after the lease, the row is claimed again and its attempts
// are spent on claims whose outcome was fenced off.
const MinLease = time.Second

// LoadLabeling reads the labeling configuration.
func LoadLabeling(lookup Lookup) (Labeling, error) {
	r := reader{lookup: lookup}
	c := Labeling{
		HTTPAddr:           r.str("HTTP_ADDR", ":8080"),
		EventsToken:        r.token("EVENTS_TOKEN"),
		BillingURL:         r.httpURL("BILLING_URL", "http://localhost:8081"),
		ConsoleBillingURL:  r.optionalURL("CONSOLE_BILLING_URL", ""),
		ConsoleTraceURL:    r.optionalURL("CONSOLE_TRACE_URL", "{trace}"),
		PollInterval:       r.duration("OUTBOX_POLL_INTERVAL", time.Second, maxOutboxDuration),
		ClaimSize:          r.positiveInt("OUTBOX_CLAIM_SIZE", DefaultClaimSize, MaxClaimSize),
		Workers:            r.positiveInt("OUTBOX_WORKERS", DefaultWorkers, MaxClaimSize),
		HandlerTimeout:     r.duration("OUTBOX_HANDLER_TIMEOUT", 30*time.Second, maxOutboxDuration),
		Lease:              r.duration("OUTBOX_LEASE", 5*time.Minute, maxDuration),
		MaxAttempts:        r.positiveInt("OUTBOX_MAX_ATTEMPTS", 10, MaxAttempts),
		RetryBase:          r.duration("OUTBOX_RETRY_BASE", 5*time.Second, maxOutboxDuration),
		RetryMax:           r.duration("OUTBOX_RETRY_MAX", 15*time.Minute, maxDuration),
		ProcessedRetention: r.duration("OUTBOX_PROCESSED_RETENTION", 168*time.Hour, maxDuration),
		OutboxNotify:       r.boolean("OUTBOX_NOTIFY", true),
		CleanupInterval:    r.duration("CLEANUP_INTERVAL", time.Hour, maxDuration),
		Bounds:             r.bounds(),

		EventsTransport:     r.oneOf("EVENTS_TRANSPORT", TransportHTTP, TransportHTTP, TransportNATS),
		NATSURL:             r.natsURL("NATS_URL"),
		NATSReplicas:        r.positiveInt("NATS_REPLICAS", 1, MaxClaimSize),
		NATSDuplicateWindow: r.duration("NATS_DUPLICATE_WINDOW", DefaultDuplicateWindow, maxDuration),
		NATSCreds:           r.file("NATS_CREDS"),
		NATSConsumers:       r.names("NATS_CONSUMERS", "billing"),
	}
	c.DatabaseURL, c.DatabaseDefaulted = r.databaseURL(DefaultLabelingDatabase)
	if r.err == nil && c.EventsTransport == TransportNATS && c.NATSURL == "" {
		r.fail("NATS_URL", "required with EVENTS_TRANSPORT=nats")
	}
	if r.err == nil && c.NATSReplicas > 5 {
		r.fail("NATS_REPLICAS", "%d is more than JetStream's 5", c.NATSReplicas)
	}
	if r.err == nil && c.NATSDuplicateWindow > c.ProcessedRetention {
		r.fail("NATS_DUPLICATE_WINDOW", "%s is longer than OUTBOX_PROCESSED_RETENTION (%s), which is how long a published row is kept",
			c.NATSDuplicateWindow, c.ProcessedRetention)
	}
	if r.err == nil && c.RetryMax < c.RetryBase {
		r.fail("OUTBOX_RETRY_MAX", "%s is less than OUTBOX_RETRY_BASE (%s)", c.RetryMax, c.RetryBase)
	}
	if r.err == nil && c.Lease < MinLease {
		r.fail("OUTBOX_LEASE", "%s is less than the minimum of %s (a fifth of the lease is kept for recording each outcome)",
			c.Lease, MinLease)
	}
	if r.err == nil && c.HandlerTimeout > c.Lease {
		r.fail("OUTBOX_LEASE", "%s is shorter than OUTBOX_HANDLER_TIMEOUT (%s): a claim takes no more rows than OUTBOX_WORKERS has free, so each claimed row starts at once and must finish within the lease",
			c.Lease, c.HandlerTimeout)
	}
	return c, r.err
}

// LoadCommand reads what an operator command needs, and only that (contract
// section 1): DATABASE_URL (def when unset: the service's Default*Database)
// and the DB_* bounds; never EVENTS_TOKEN, nor HTTP_REQUEST_TIMEOUT, so a
// setting meant for serve cannot stop a migration or a requeue.
func LoadCommand(lookup Lookup, def string) (Command, error) {
	r := reader{lookup: lookup}
	c := Command{Bounds: r.dbBounds()}
	c.DatabaseURL, c.DatabaseDefaulted = r.databaseURL(def)
	return c, r.err
}

// Replay is what `billing nats replay` reads: the operator command's
// settings, and the keys and late-delivery bound of billing's intake, so a
// record is checked exactly as a delivery is.
type Replay struct {
	Command
	EventsToken         string
	EventsTokenPrevious string
	ReceiptsRetention   time.Duration
}

// LoadReplay reads DATABASE_URL, the DB_* bounds, EVENTS_TOKEN (required),
// EVENTS_TOKEN_PREVIOUS and RECEIPTS_RETENTION, with serve's rules for each.
func LoadReplay(lookup Lookup) (Replay, error) {
	r := reader{lookup: lookup}
	c := Replay{
		Command:             Command{Bounds: r.dbBounds()},
		EventsToken:         r.token("EVENTS_TOKEN"),
		EventsTokenPrevious: r.optionalToken("EVENTS_TOKEN_PREVIOUS"),
		ReceiptsRetention:   r.duration("RECEIPTS_RETENTION", 720*time.Hour, maxDuration),
	}
	c.DatabaseURL, c.DatabaseDefaulted = r.databaseURL(DefaultBillingDatabase)
	if r.err == nil && c.EventsTokenPrevious != "" && c.EventsTokenPrevious == c.EventsToken {
		r.fail("EVENTS_TOKEN_PREVIOUS", "equals EVENTS_TOKEN: a rotation needs a new token (or unset the previous one)")
	}
	return c, r.err
}

// LoopbackHost is the host serve listens on when HTTP_ADDR is unset and
// AUTH_DISABLED=true (contract section 1): an open /v1 is reachable from this
// machine only unless HTTP_ADDR says otherwise.
const LoopbackHost = "127.0.0.1"

// ServeAddr is serve's listen address: HTTP_ADDR when set, else def (":8080",
// ":8081"), on LoopbackHost when authentication is off.
func ServeAddr(lookup Lookup, def string, authDisabled bool) string {
	r := reader{lookup: lookup}
	if addr := r.str("HTTP_ADDR", ""); addr != "" {
		return addr
	}
	if authDisabled {
		return LoopbackHost + def
	}
	return def
}

// LoadHTTPAddr reads HTTP_ADDR alone, for the healthcheck command.
func LoadHTTPAddr(lookup Lookup, def string) string {
	r := reader{lookup: lookup}
	return r.str("HTTP_ADDR", def)
}

func (r *reader) bounds() Bounds {
	b := r.dbBounds()
	b.RequestTimeout = r.duration("HTTP_REQUEST_TIMEOUT", DefaultRequestTimeout, MaxRequestTimeout)
	return b
}

// dbBounds reads the DB_* bounds alone (RequestTimeout stays zero).
func (r *reader) dbBounds() Bounds {
	return Bounds{
		StatementTimeout: r.duration("DB_STATEMENT_TIMEOUT", DefaultStatementTimeout, maxDBTimeout),
		LockTimeout:      r.duration("DB_LOCK_TIMEOUT", DefaultLockTimeout, maxDBTimeout),
	}
}

// LoadBilling reads the billing configuration.
func LoadBilling(lookup Lookup) (Billing, error) {
	r := reader{lookup: lookup}
	c := Billing{
		HTTPAddr:            r.str("HTTP_ADDR", ":8081"),
		EventsToken:         r.token("EVENTS_TOKEN"),
		EventsTokenPrevious: r.optionalToken("EVENTS_TOKEN_PREVIOUS"),
		ReceiptsRetention:   r.duration("RECEIPTS_RETENTION", 720*time.Hour, maxDuration),
		CleanupInterval:     r.duration("CLEANUP_INTERVAL", time.Hour, maxDuration),
		Bounds:              r.bounds(),
		ConsoleLabelingURL:  r.optionalURL("CONSOLE_LABELING_URL", ""),
		NATSURL:             r.natsURL("NATS_URL"),
		NATSAckWait:         r.duration("NATS_ACK_WAIT", 30*time.Second, maxOutboxDuration),
		ApplyGroupMax:       r.positiveInt("BILLING_APPLY_GROUP_MAX", DefaultApplyGroupMax, MaxApplyGroup),
		NATSCreds:           r.file("NATS_CREDS"),
		NATSMaxDeliveries:   r.positiveInt("NATS_MAX_DELIVERIES", DefaultNATSMaxDeliveries, MaxNATSMaxDeliveries),
		NATSFailedMaxRows:   r.positiveInt("NATS_FAILED_MAX_ROWS", DefaultNATSFailedMaxRows, MaxNATSFailedMaxRows),
		NATSFailedMaxBytes:  r.positiveInt("NATS_FAILED_MAX_BYTES", DefaultNATSFailedMaxBytes, MaxNATSFailedMaxBytes),
	}
	c.DatabaseURL, c.DatabaseDefaulted = r.databaseURL(DefaultBillingDatabase)
	if r.err == nil && c.EventsTokenPrevious != "" && c.EventsTokenPrevious == c.EventsToken {
		r.fail("EVENTS_TOKEN_PREVIOUS", "equals EVENTS_TOKEN: a rotation needs a new token (or unset the previous one)")
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
	c := Auth{Disabled: r.boolean("AUTH_DISABLED", false)}
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

// token reads a shared secret that must be set: a blank or whitespace-only
// value is refused, as a token anyone can guess (a stray space in an env file).
func (r *reader) token(name string) string {
	v := r.required(name)
	if v != "" && strings.TrimSpace(v) == "" {
		r.fail(name, "blank (only whitespace)")
	}
	return v
}

// optionalToken reads a shared secret that may be unset, refused when set blank.
func (r *reader) optionalToken(name string) string {
	v := r.str(name, "")
	if v != "" && strings.TrimSpace(v) == "" {
		r.fail(name, "blank (only whitespace)")
	}
	return v
}

// The DATABASE_URL of each service when it is unset: a SQLite file under the
// working directory (contract section 9).
const (
	DefaultLabelingDatabase = "sqlite:data/labeling.db"
	DefaultBillingDatabase  = "sqlite:data/billing.db"
)

// databaseURL reads DATABASE_URL, def when unset (defaulted then reports
// true, for the start-up's log line): sqlite:PATH or a PostgreSQL URL.
func (r *reader) databaseURL(def string) (v string, defaulted bool) {
	v = r.str("DATABASE_URL", "")
	if v == "" {
		return def, true
	}
	if strings.HasPrefix(v, "sqlite:") {
		if _, err := sqldb.SQLitePath(v); err != nil {
			r.fail("DATABASE_URL", "%s", err)
		}
		return v, false
	}
	if _, err := pgxpool.ParseConfig(v); err != nil {
		// The parse error may echo the password: name the variable only.
		r.fail("DATABASE_URL", "neither sqlite:PATH nor a valid PostgreSQL connection string")
	}
	return v, false
}

func (r *reader) httpURL(name, def string) string {
	v := r.str(name, def)
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.fail(name, "%q is not an http(s) URL", v)
	}
	return v
}

// optionalURL is an http(s) URL or empty; a non-empty one must contain must.
func (r *reader) optionalURL(name, must string) string {
	v := r.str(name, "")
	if v == "" {
		return ""
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.fail(name, "%q is not an http(s) URL", v)
		return ""
	}
	if !strings.Contains(v, must) {
		r.fail(name, "%q does not contain %s", v, must)
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

// DefaultNATSMaxDeliveries is NATS_MAX_DELIVERIES' default: with billing's nak
// delay doubling from 250ms to 30s, about 8 hours of redeliveries, long enough
// to ship a billing that knows a new event type. MaxNATSMaxDeliveries bounds it.
const (
	DefaultNATSMaxDeliveries = 1000
	MaxNATSMaxDeliveries     = 1_000_000
	// DefaultNATSFailedMaxRows and DefaultNATSFailedMaxBytes bound
	// billing_nats_failed by default: 100000 records, 1 GiB of payloads.
	DefaultNATSFailedMaxRows  = 100_000
	MaxNATSFailedMaxRows      = 100_000_000
	DefaultNATSFailedMaxBytes = 1 << 30
	MaxNATSFailedMaxBytes     = 1 << 40
)

// file reads the path of a file that must be readable now, or empty.
func (r *reader) file(name string) string {
	v := r.str(name, "")
	if v == "" {
		return v
	}
	if _, err := os.ReadFile(v); err != nil {
		r.fail(name, "%v", err)
		return ""
	}
	return v
}

// names reads a list of NATS names (letters, digits, - and _) separated by
// commas; it cannot be empty.
func (r *reader) names(name, def string) []string {
	v := r.str(name, def)
	var out []string
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" || strings.Trim(part, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
			r.fail(name, "%q is not a list of durable names (letters, digits, - and _) separated by commas", v)
			return nil
		}
		out = append(out, part)
	}
	return out
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

func (r *reader) duration(name string, def, limit time.Duration) time.Duration {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		r.fail(name, "%q is not a duration (use Go syntax: 250ms, 30s, 5m)", v)
		return def
	}
	switch {
	case d <= 0:
		r.fail(name, "%q must be positive", v)
		return def
	case d > limit:
		r.fail(name, "%q is more than the maximum of %s", v, limit)
		return def
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

func (r *reader) positiveInt(name string, def, limit int) int {
	v := r.str(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	switch {
	case err != nil || n <= 0:
		r.fail(name, "%q is not a positive integer", v)
		return def
	case n > limit:
		r.fail(name, "%q is more than the maximum of %d", v, limit)
		return def
	}
	return n
}

// Package config reads each service's settings from environment variables, the
// only configuration source (contract section 1), and maps them into the
// components' Configs (outbox.Config, web.Config, sqldb.Bounds, ...). It holds
// no component's rule nor default: it parses each value (syntax, sign, the
// component's maximum), then runs the component's own Check with each field
// named by its variable. A bad or missing value is an error naming the
// variable, so the process stops at start with a one-line message. Only the
// binaries (cmd/) import it.
package config

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/infra/webhook"
	"github.com/acme/outboxpair/infra/wire"
	"github.com/acme/outboxpair/labeling"
)

// Lookup reads one variable; os.LookupEnv fits. It is an alias of the plain
// function type, so infra/cli (which must not import this package) names the
// same type.
type Lookup = func(name string) (string, bool)

// Labeling is the configuration of the labeling service: each component's
// Config, filled from the environment and checked by the component's own
// rules, and what the wiring needs besides.
type Labeling struct {
	DatabaseURL string
	// DatabaseDefaulted: DATABASE_URL was unset (DatabaseURL is the default
	// SQLite file), for the start-up's log line.
	DatabaseDefaulted bool
	// Bounds are the database's (DB_STATEMENT_TIMEOUT, DB_LOCK_TIMEOUT).
	sqldb.Bounds
	// HTTP is the server's (HTTP_ADDR, HTTP_REQUEST_TIMEOUT,
	// CONSOLE_SECURE_COOKIES).
	HTTP        web.Config
	EventsToken string
	BillingURL  string
	// ConsoleBillingURL (CONSOLE_BILLING_URL) is the link from labeling's
	// console to billing's, or empty; ConsoleTraceURL (CONSOLE_TRACE_URL) a
	// trace viewer's URL with {trace} for a row's trace id, or empty.
	ConsoleBillingURL string
	ConsoleTraceURL   string

	// Relay is the outbox relay's (the OUTBOX_* variables).
	Relay outbox.Config
	// Cleanup is the retention's (CLEANUP_INTERVAL).
	Cleanup retention.Config

	// EventsTransport is TransportHTTP (the relay POSTs to BillingURL) or
	// TransportNATS (it publishes to JetStream with NATS).
	EventsTransport string
	// EventsFormat (EVENTS_FORMAT) is how labeling writes each event on
	// either transport: wire.FormatEnvelope, the default, or
	// wire.FormatCloudEvents (binary content mode).
	EventsFormat wire.Format
	// NATS is the publisher's (NATS_URL, NATS_CREDS, NATS_REPLICAS,
	// NATS_DUPLICATE_WINDOW, NATS_CONSUMERS, NATS_CONSUMER_<NAME>_TYPES; its Key
	// is EVENTS_TOKEN).
	NATS stream.PublisherConfig

	// Subscribers are the further HTTP subscribers (SUBSCRIBERS and each
	// one's SUBSCRIBER_<NAME>_* variables), in SUBSCRIBERS' order; none when
	// it is unset (billing alone, at BILLING_URL, today's setup).
	Subscribers []Subscriber
}

// Subscriber is one further HTTP subscriber of labeling's events (fan-out):
// every event of its Types is delivered to it, as to billing, on a relay of
// its own.
type Subscriber struct {
	Name  string   // its name in SUBSCRIBERS (lowercase)
	URL   string   // SUBSCRIBER_<NAME>_URL: its base URL (events are POSTed to URL + /internal/v1/events)
	Token string   // SUBSCRIBER_<NAME>_TOKEN: its own bearer token, distinct from EVENTS_TOKEN and every other's
	Types []string // SUBSCRIBER_<NAME>_TYPES: the event types it receives, each one labeling publishes
}

// SubscriberVar is the variable of a further subscriber's setting: field is
// URL, TOKEN or TYPES ("ledger", "URL" → SUBSCRIBER_LEDGER_URL).
func SubscriberVar(name, field string) string {
	return "SUBSCRIBER_" + strings.ToUpper(name) + "_" + field
}

// Values of EVENTS_TRANSPORT.
const (
	TransportHTTP = "http"
	TransportNATS = "nats"
)

// Billing is the configuration of the billing service: each component's
// Config, filled from the environment and checked by the component's own
// rules, and what the wiring needs besides.
type Billing struct {
	DatabaseURL       string
	DatabaseDefaulted bool // DATABASE_URL was unset, DatabaseURL is the default SQLite file
	// Bounds are the database's (DB_STATEMENT_TIMEOUT, DB_LOCK_TIMEOUT).
	sqldb.Bounds
	// HTTP is the server's (HTTP_ADDR, HTTP_REQUEST_TIMEOUT,
	// CONSOLE_SECURE_COOKIES).
	HTTP web.Config
	// Billing is the intake's and the use cases' (EVENTS_TOKEN,
	// EVENTS_TOKEN_PREVIOUS, RECEIPTS_RETENTION, BILLING_APPLY_GROUP_MAX).
	Billing billing.Config
	// Cleanup is the retention's (CLEANUP_INTERVAL).
	Cleanup retention.Config

	// Relay is the relay of billing's outbox, billing_outbox_events (the
	// OUTBOX_* variables, as labeling's); it runs only with Provider.URL.
	Relay outbox.Config
	// Provider is where the relay calls (PROVIDER_URL; empty: no relay, no
	// QuotaChanged row is appended, rows already pending are kept) and the
	// secrets that sign (PROVIDER_SECRET).
	Provider webhook.Config

	// NATS, when its URL (NATS_URL) is set, makes billing also consume the
	// stream LABELING_EVENTS (NATS_CREDS, NATS_ACK_WAIT; the durable is
	// billing's); NATSIntake is how its messages are checked and recorded
	// (NATS_MAX_DELIVERIES, NATS_FAILED_MAX_ROWS, NATS_FAILED_MAX_BYTES; the
	// keys are EVENTS_TOKEN and EVENTS_TOKEN_PREVIOUS).
	NATS       stream.ConsumerConfig
	NATSIntake billing.NATSConfig

	// ConsoleLabelingURL (CONSOLE_LABELING_URL) is the link from billing's
	// console to labeling's, or empty.
	ConsoleLabelingURL string
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

// The environment variable of each component's field, by which a rule the
// component words is reported (contract section 1: the message names the
// variable).
var (
	relayVars = map[string]string{
		"PollInterval":       "OUTBOX_POLL_INTERVAL",
		"ClaimSize":          "OUTBOX_CLAIM_SIZE",
		"Workers":            "OUTBOX_WORKERS",
		"HandlerTimeout":     "OUTBOX_HANDLER_TIMEOUT",
		"Lease":              "OUTBOX_LEASE",
		"MaxAttempts":        "OUTBOX_MAX_ATTEMPTS",
		"RetryBase":          "OUTBOX_RETRY_BASE",
		"RetryMax":           "OUTBOX_RETRY_MAX",
		"ProcessedRetention": "OUTBOX_PROCESSED_RETENTION",
	}
	boundsVars    = map[string]string{"StatementTimeout": "DB_STATEMENT_TIMEOUT", "LockTimeout": "DB_LOCK_TIMEOUT"}
	webVars       = map[string]string{"Addr": "HTTP_ADDR", "RequestTimeout": "HTTP_REQUEST_TIMEOUT", "SecureCookies": "CONSOLE_SECURE_COOKIES"}
	publisherVars = map[string]string{
		"URL": "NATS_URL", "Creds": "NATS_CREDS", "Replicas": "NATS_REPLICAS",
		"DuplicateWindow": "NATS_DUPLICATE_WINDOW", "Consumers": "NATS_CONSUMERS", "ConsumerTypes": "NATS_CONSUMER_<NAME>_TYPES",
		"Key": "EVENTS_TOKEN", "Retention": "OUTBOX_PROCESSED_RETENTION",
	}
	consumerVars = map[string]string{"URL": "NATS_URL", "Creds": "NATS_CREDS", "AckWait": "NATS_ACK_WAIT"}
	billingVars  = map[string]string{
		"EventsToken": "EVENTS_TOKEN", "EventsTokenPrevious": "EVENTS_TOKEN_PREVIOUS",
		"ReceiptsRetention": "RECEIPTS_RETENTION", "ApplyGroupMax": "BILLING_APPLY_GROUP_MAX",
	}
	intakeVars = map[string]string{
		"MaxDeliveries": "NATS_MAX_DELIVERIES", "MaxFailedRows": "NATS_FAILED_MAX_ROWS", "MaxFailedBytes": "NATS_FAILED_MAX_BYTES",
		"Key": "EVENTS_TOKEN", "PreviousKey": "EVENTS_TOKEN_PREVIOUS",
	}
	retentionVars = map[string]string{"Interval": "CLEANUP_INTERVAL"}
)

// checker is a component's rule check with its fields named by the namer.
type checker interface {
	Check(name func(field string) string) error
}

// check runs c's rules, its fields named by vars, unless an error came first.
func (r *reader) check(c checker, vars map[string]string) {
	if r.err != nil {
		return
	}
	r.err = c.Check(func(field string) string {
		if v, ok := vars[field]; ok {
			return v
		}
		return field
	})
}

// Defaults of this package's own, the services' rather than a component's:
// their listen addresses (HTTP_ADDR) and where labeling delivers
// (BILLING_URL). Every other default is the component's
// (outbox.DefaultLease, web.DefaultRequestTimeout, ...), read from it.
const (
	DefaultLabelingAddr = ":8080"
	DefaultBillingAddr  = ":8081"
	DefaultBillingURL   = "http://localhost:8081"
)

// LoadLabeling reads the labeling configuration.
func LoadLabeling(lookup Lookup) (Labeling, error) {
	r := reader{lookup: lookup}
	c := Labeling{
		HTTP:              r.web(DefaultLabelingAddr),
		EventsToken:       r.token("EVENTS_TOKEN"),
		BillingURL:        r.httpURL("BILLING_URL", DefaultBillingURL),
		ConsoleBillingURL: r.optionalURL("CONSOLE_BILLING_URL", ""),
		ConsoleTraceURL:   r.optionalURL("CONSOLE_TRACE_URL", "{trace}"),
		Relay:             r.relay(),
		Cleanup:           r.cleanup(),
		Bounds:            r.dbBounds(),

		EventsTransport: r.oneOf("EVENTS_TRANSPORT", TransportHTTP, TransportHTTP, TransportNATS),
		EventsFormat: wire.Format(r.oneOf("EVENTS_FORMAT", string(wire.FormatEnvelope),
			string(wire.FormatEnvelope), string(wire.FormatCloudEvents))),
	}
	c.NATS = stream.PublisherConfig{
		URL:             r.natsURL("NATS_URL"),
		Replicas:        r.positiveInt("NATS_REPLICAS", stream.DefaultReplicas, maxCount),
		DuplicateWindow: r.duration("NATS_DUPLICATE_WINDOW", stream.DefaultDuplicateWindow, maxDuration),
		Creds:           r.file("NATS_CREDS"),
		Consumers:       r.names("NATS_CONSUMERS", DefaultConsumer),
		Key:             []byte(c.EventsToken),
		Retention:       c.Relay.ProcessedRetention,
		Format:          c.EventsFormat,
	}
	c.Subscribers = r.subscribers(c.EventsToken)
	c.NATS.ConsumerTypes = r.consumerTypes(c.NATS.Consumers)
	c.DatabaseURL, c.DatabaseDefaulted = r.databaseURL(DefaultLabelingDatabase)
	if r.err == nil && c.EventsTransport == TransportNATS && c.NATS.URL == "" {
		r.fail("NATS_URL", "required with EVENTS_TRANSPORT=nats")
	}
	if r.err == nil && c.EventsTransport == TransportNATS && len(c.Subscribers) > 0 {
		r.fail("SUBSCRIBERS", "fans out over HTTP only: with EVENTS_TRANSPORT=nats each consumer reads its own durable (NATS_CONSUMERS); unset it")
	}
	r.check(c.NATS, publisherVars)
	r.check(c.Relay, relayVars)
	return c, r.err
}

// relay reads the OUTBOX_* variables: the relay's settings, the same for
// labeling's relay and billing's, with outbox's defaults and bounds (the
// caller checks them with relayVars).
func (r *reader) relay() outbox.Config {
	return outbox.Config{
		PollInterval:       r.duration("OUTBOX_POLL_INTERVAL", outbox.DefaultPollInterval, outbox.MaxShortDuration),
		ClaimSize:          r.positiveInt("OUTBOX_CLAIM_SIZE", outbox.DefaultClaimSize, outbox.MaxClaimSize),
		Workers:            r.positiveInt("OUTBOX_WORKERS", outbox.DefaultWorkers, outbox.MaxClaimSize),
		HandlerTimeout:     r.duration("OUTBOX_HANDLER_TIMEOUT", outbox.DefaultHandlerTimeout, outbox.MaxShortDuration),
		Lease:              r.duration("OUTBOX_LEASE", outbox.DefaultLease, outbox.MaxLongDuration),
		MaxAttempts:        r.positiveInt("OUTBOX_MAX_ATTEMPTS", outbox.DefaultMaxAttempts, outbox.MaxAttempts),
		RetryBase:          r.duration("OUTBOX_RETRY_BASE", outbox.DefaultRetryBase, outbox.MaxShortDuration),
		RetryMax:           r.duration("OUTBOX_RETRY_MAX", outbox.DefaultRetryMax, outbox.MaxLongDuration),
		ProcessedRetention: r.duration("OUTBOX_PROCESSED_RETENTION", outbox.DefaultProcessedRetention, outbox.MaxLongDuration),
		Notify:             r.boolean("OUTBOX_NOTIFY", outbox.DefaultNotify),
	}
}

// provider reads PROVIDER_URL (an absolute http(s) URL, or unset: billing
// calls nothing) and PROVIDER_SECRET (webhook.ParseSecrets; required with
// PROVIDER_URL, checked whenever set). A bad secret is reported naming the
// variable and the position of the secret, never quoting it.
func (r *reader) provider() webhook.Config {
	c := webhook.Config{URL: r.optionalURL("PROVIDER_URL", "")}
	secret := r.str("PROVIDER_SECRET", "")
	if c.URL == "" && secret == "" {
		return c
	}
	secrets, err := webhook.ParseSecrets(secret)
	if err != nil {
		if r.err == nil {
			if secret == "" {
				err = errors.New("PROVIDER_SECRET: required with PROVIDER_URL")
			}
			r.err = err
		}
		return c
	}
	c.Secrets = secrets
	return c
}

// subscribers reads SUBSCRIBERS (names separated by commas, each a lowercase
// identifier, none repeated nor "billing", which is BILLING_URL's) and, for
// each name, looks its three variables up directly (no scan of the
// environment): SUBSCRIBER_<NAME>_URL (an http(s) URL, required),
// SUBSCRIBER_<NAME>_TOKEN (required, not blank, distinct from EVENTS_TOKEN and
// from every other subscriber's, so no subscriber holds a token another
// accepts) and SUBSCRIBER_<NAME>_TYPES (types separated by commas, at least
// one, each a type labeling publishes, none repeated).
func (r *reader) subscribers(eventsToken string) []Subscriber {
	v := r.str("SUBSCRIBERS", "")
	if strings.TrimSpace(v) == "" {
		return nil
	}
	var out []Subscriber
	known := labeling.Tags(labeling.Events())
	tokens := map[string]string{eventsToken: "EVENTS_TOKEN"}
	for _, part := range strings.Split(v, ",") {
		name := strings.TrimSpace(part)
		if err := outbox.CheckSubscriber(name); err != nil {
			r.fail("SUBSCRIBERS", "%q: %s", v, err)
			return nil
		}
		if name == DefaultConsumer {
			r.fail("SUBSCRIBERS", "%q: billing is BILLING_URL's subscriber and receives every type already", v)
			return nil
		}
		if slices.ContainsFunc(out, func(s Subscriber) bool { return s.Name == name }) {
			r.fail("SUBSCRIBERS", "%q names %s twice", v, name)
			return nil
		}
		s := Subscriber{Name: name}
		urlVar, tokenVar, typesVar := SubscriberVar(name, "URL"), SubscriberVar(name, "TOKEN"), SubscriberVar(name, "TYPES")
		if r.required(urlVar) != "" {
			s.URL = r.httpURL(urlVar, "")
		}
		s.Token = r.token(tokenVar)
		if other, ok := tokens[s.Token]; ok && s.Token != "" && r.err == nil {
			r.fail(tokenVar, "the same as %s: each subscriber needs a token of its own, or one could forge deliveries to the other", other)
		}
		tokens[s.Token] = tokenVar
		for _, t := range strings.Split(r.required(typesVar), ",") {
			t = strings.TrimSpace(t)
			switch {
			case r.err != nil:
			case t == "":
				r.fail(typesVar, "an empty type: list event types separated by commas")
			case !slices.Contains(known, t):
				r.fail(typesVar, "%q is not a type labeling publishes (%s)", t, strings.Join(known, ", "))
			case slices.Contains(s.Types, t):
				r.fail(typesVar, "names %s twice", t)
			default:
				s.Types = append(s.Types, t)
			}
		}
		out = append(out, s)
	}
	return out
}

// DefaultConsumer is NATS_CONSUMERS' default: billing's durable.
const DefaultConsumer = "billing"

// maxDuration (ten years) bounds a duration no component bounds, and maxCount
// the number NATS_REPLICAS is read within before the publisher's own rule
// (stream.MaxReplicas) names JetStream's limit.
const (
	maxDuration = 10 * 365 * 24 * time.Hour
	maxCount    = 1000
)

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
		ReceiptsRetention:   r.duration("RECEIPTS_RETENTION", billing.DefaultReceiptsRetention, maxDuration),
	}
	c.DatabaseURL, c.DatabaseDefaulted = r.databaseURL(DefaultBillingDatabase)
	r.check(billing.Config{
		EventsToken: c.EventsToken, EventsTokenPrevious: c.EventsTokenPrevious, ReceiptsRetention: c.ReceiptsRetention,
	}, billingVars)
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

// web reads the server's settings: HTTP_ADDR (def when unset),
// HTTP_REQUEST_TIMEOUT and CONSOLE_SECURE_COOKIES (false when unset: only a
// request over TLS gets Secure cookies).
func (r *reader) web(def string) web.Config {
	c := web.Config{
		Addr:           r.str("HTTP_ADDR", def),
		RequestTimeout: r.duration("HTTP_REQUEST_TIMEOUT", web.DefaultRequestTimeout, web.MaxRequestTimeout),
		SecureCookies:  r.boolean("CONSOLE_SECURE_COOKIES", false),
	}
	r.check(c, webVars)
	return c
}

// dbBounds reads the DB_* bounds.
func (r *reader) dbBounds() sqldb.Bounds {
	b := sqldb.Bounds{
		StatementTimeout: r.duration("DB_STATEMENT_TIMEOUT", sqldb.DefaultStatementTimeout, sqldb.MaxTimeout),
		LockTimeout:      r.duration("DB_LOCK_TIMEOUT", sqldb.DefaultLockTimeout, sqldb.MaxTimeout),
	}
	r.check(b, boundsVars)
	return b
}

// cleanup reads CLEANUP_INTERVAL.
func (r *reader) cleanup() retention.Config {
	c := retention.Config{Interval: r.duration("CLEANUP_INTERVAL", retention.DefaultInterval, maxDuration)}
	r.check(c, retentionVars)
	return c
}

// LoadBilling reads the billing configuration.
func LoadBilling(lookup Lookup) (Billing, error) {
	r := reader{lookup: lookup}
	c := Billing{
		HTTP: r.web(DefaultBillingAddr),
		Billing: billing.Config{
			EventsToken:         r.token("EVENTS_TOKEN"),
			EventsTokenPrevious: r.optionalToken("EVENTS_TOKEN_PREVIOUS"),
			ReceiptsRetention:   r.duration("RECEIPTS_RETENTION", billing.DefaultReceiptsRetention, maxDuration),
		},
		Cleanup:            r.cleanup(),
		Bounds:             r.dbBounds(),
		ConsoleLabelingURL: r.optionalURL("CONSOLE_LABELING_URL", ""),
		Relay:              r.relay(),
		Provider:           r.provider(),
		NATS: stream.ConsumerConfig{
			URL:     r.natsURL("NATS_URL"),
			AckWait: r.duration("NATS_ACK_WAIT", stream.DefaultAckWait, stream.MaxAckWait),
		},
	}
	c.Billing.ApplyGroupMax = r.positiveInt("BILLING_APPLY_GROUP_MAX", billing.DefaultApplyGroupMax, billing.MaxApplyGroupMax)
	c.NATS.Creds = r.file("NATS_CREDS")
	c.NATS.Durable = billing.Durable
	c.NATSIntake = billing.NATSConfig{
		Key:            []byte(c.Billing.EventsToken),
		PreviousKey:    []byte(c.Billing.EventsTokenPrevious),
		MaxDeliveries:  uint64(r.positiveInt("NATS_MAX_DELIVERIES", billing.DefaultNATSMaxDeliveries, billing.MaxNATSMaxDeliveries)),
		MaxFailedRows:  int64(r.positiveInt("NATS_FAILED_MAX_ROWS", billing.DefaultNATSFailedMaxRows, billing.MaxNATSFailedMaxRows)),
		MaxFailedBytes: int64(r.positiveInt("NATS_FAILED_MAX_BYTES", billing.DefaultNATSFailedMaxBytes, billing.MaxNATSFailedMaxBytes)),
	}
	c.DatabaseURL, c.DatabaseDefaulted = r.databaseURL(DefaultBillingDatabase)
	r.check(c.Billing, billingVars)
	r.check(c.NATS, consumerVars)
	r.check(c.NATSIntake, intakeVars)
	r.check(c.Relay, relayVars)
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

// Settings is a as infra/auth takes it.
func (a Auth) Settings() auth.Settings {
	return auth.Settings{Disabled: a.Disabled, Config: auth.Config{JWKSURL: a.JWKSURL, Issuer: a.Issuer, Audience: a.Audience}}
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

// httpURL reads an http(s) URL. A refused one is quoted as wire.RedactURL
// quotes it, without the userinfo, query and fragment that may hold a
// credential.
func (r *reader) httpURL(name, def string) string {
	v := r.str(name, def)
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.fail(name, "%q is not an http(s) URL", wire.RedactURL(v))
	}
	return v
}

// optionalURL is an http(s) URL or empty; a non-empty one must contain must.
// A refused one is quoted as httpURL quotes it.
func (r *reader) optionalURL(name, must string) string {
	v := r.str(name, "")
	if v == "" {
		return ""
	}
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		r.fail(name, "%q is not an http(s) URL", wire.RedactURL(v))
		return ""
	}
	if !strings.Contains(v, must) {
		r.fail(name, "%q does not contain %s", wire.RedactURL(v), must)
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

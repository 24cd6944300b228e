// Package config is the labeling binary's loader: it reads labeling's
// settings from the environment (contract section 1) with infra/env's
// readers, each value checked once where it is read, and every rule between
// two settings checked where the second is read, so a refusal is one line
// that starts with the variable to change. It lives beside cmd/labeling,
// which alone runs it, in a package of its own rather than in package main
// because deploy's tests (the contract's defaults, the compose file) and
// e2e's load it too.
package config

import (
	"slices"
	"strings"
	"time"

	"github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/infra/wire"
	"github.com/acme/outboxpair/labeling"
)

// Labeling is the configuration of the labeling service: each component's
// Config, filled from the environment, and what the wiring needs besides.
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

// ConsumerTypesVar is the variable of the types labeling makes durable n of
// NATS_CONSUMERS with: NATS_CONSUMER_<NAME>_TYPES, NAME the name in capitals
// as SUBSCRIBER_<NAME>_* spell a subscriber's (billing:
// NATS_CONSUMER_BILLING_TYPES), so a deployment file's variables look alike.
func ConsumerTypesVar(n string) string { return "NATS_CONSUMER_" + strings.ToUpper(n) + "_TYPES" }

// Values of EVENTS_TRANSPORT.
const (
	TransportHTTP = "http"
	TransportNATS = "nats"
)

// Labeling's defaults of its own: its listen address (HTTP_ADDR), its
// database (DATABASE_URL: a SQLite file under the working directory,
// contract section 9), where it delivers (BILLING_URL) and the durable the
// stream keeps every message for (NATS_CONSUMERS: billing's). Every other
// default is a component's (outbox.DefaultLease, web.DefaultRequestTimeout,
// ...), read from it.
const (
	DefaultAddr       = ":8080"
	DefaultDatabase   = "sqlite:data/labeling.db"
	DefaultBillingURL = "http://localhost:8081"
	DefaultConsumer   = "billing"
)

// LoadLabeling reads the labeling configuration: the first refusal, one line
// naming the variable, is the error.
func LoadLabeling(lookup env.Lookup) (Labeling, error) {
	r := env.New(lookup)
	c := Labeling{
		HTTP:              r.Web(DefaultAddr),
		EventsToken:       r.Token("EVENTS_TOKEN"),
		BillingURL:        r.HTTPURL("BILLING_URL", DefaultBillingURL),
		ConsoleBillingURL: r.OptionalURL("CONSOLE_BILLING_URL", ""),
		ConsoleTraceURL:   r.OptionalURL("CONSOLE_TRACE_URL", "{trace}"),
		Relay:             r.Relay(),
		Cleanup:           r.Cleanup(),
		Bounds:            r.Bounds(),

		EventsTransport: r.OneOf("EVENTS_TRANSPORT", TransportHTTP, TransportHTTP, TransportNATS),
		EventsFormat: wire.Format(r.OneOf("EVENTS_FORMAT", string(wire.FormatEnvelope),
			string(wire.FormatEnvelope), string(wire.FormatCloudEvents))),
	}
	c.NATS = stream.PublisherConfig{
		URL:             r.NATSURL("NATS_URL"),
		Replicas:        replicas(r),
		DuplicateWindow: duplicateWindow(r, c.Relay.ProcessedRetention),
		Creds:           r.File("NATS_CREDS"),
		Consumers:       r.Names("NATS_CONSUMERS", DefaultConsumer),
		Key:             []byte(c.EventsToken),
		Retention:       c.Relay.ProcessedRetention,
		Format:          c.EventsFormat,
	}
	c.Subscribers = subscribers(r, c.EventsToken)
	c.NATS.ConsumerTypes = consumerTypes(r, c.NATS.Consumers)
	c.DatabaseURL, c.DatabaseDefaulted = r.DatabaseURL(DefaultDatabase)
	if c.EventsTransport == TransportNATS && c.NATS.URL == "" {
		r.Fail("NATS_URL", "required with EVENTS_TRANSPORT=nats")
	}
	if c.EventsTransport == TransportNATS && len(c.Subscribers) > 0 {
		r.Fail("SUBSCRIBERS", "fans out over HTTP only: with EVENTS_TRANSPORT=nats each consumer reads its own durable (NATS_CONSUMERS); unset it")
	}
	return c, r.Err()
}

// replicas reads NATS_REPLICAS, at most JetStream's stream.MaxReplicas.
func replicas(r *env.Reader) int {
	n := r.PositiveInt("NATS_REPLICAS", stream.DefaultReplicas, env.MaxCount)
	if n > stream.MaxReplicas {
		r.Fail("NATS_REPLICAS", "%d is more than JetStream's %d", n, stream.MaxReplicas)
	}
	return n
}

// duplicateWindow reads NATS_DUPLICATE_WINDOW, within retention
// (OUTBOX_PROCESSED_RETENTION): a republish after its row is gone is not one.
func duplicateWindow(r *env.Reader, retention time.Duration) time.Duration {
	d := r.Duration("NATS_DUPLICATE_WINDOW", stream.DefaultDuplicateWindow, env.MaxDuration)
	if d > retention {
		r.Fail("NATS_DUPLICATE_WINDOW", "%s is longer than OUTBOX_PROCESSED_RETENTION (%s), which is how long a published row is kept", d, retention)
	}
	return d
}

// subscribers reads SUBSCRIBERS (names separated by commas, each a lowercase
// identifier, none repeated nor "billing", which is BILLING_URL's) and, for
// each name, looks its three variables up directly (no scan of the
// environment): SUBSCRIBER_<NAME>_URL (an http(s) URL, required),
// SUBSCRIBER_<NAME>_TOKEN (required, not blank, distinct from EVENTS_TOKEN and
// from every other subscriber's, so no subscriber holds a token another
// accepts) and SUBSCRIBER_<NAME>_TYPES (types separated by commas, at least
// one, each a type labeling publishes, none repeated).
func subscribers(r *env.Reader, eventsToken string) []Subscriber {
	v := r.Str("SUBSCRIBERS", "")
	if strings.TrimSpace(v) == "" {
		return nil
	}
	var out []Subscriber
	known := labeling.Tags(labeling.Events())
	tokens := map[string]string{eventsToken: "EVENTS_TOKEN"}
	for _, part := range strings.Split(v, ",") {
		name := strings.TrimSpace(part)
		if err := outbox.CheckSubscriber(name); err != nil {
			r.Fail("SUBSCRIBERS", "%q: %s", v, err)
			return nil
		}
		if name == DefaultConsumer {
			r.Fail("SUBSCRIBERS", "%q: billing is BILLING_URL's subscriber and receives every type already", v)
			return nil
		}
		if slices.ContainsFunc(out, func(s Subscriber) bool { return s.Name == name }) {
			r.Fail("SUBSCRIBERS", "%q names %s twice", v, name)
			return nil
		}
		s := Subscriber{Name: name}
		urlVar, tokenVar, typesVar := SubscriberVar(name, "URL"), SubscriberVar(name, "TOKEN"), SubscriberVar(name, "TYPES")
		if r.Required(urlVar) != "" {
			s.URL = r.HTTPURL(urlVar, "")
		}
		s.Token = r.Token(tokenVar)
		if other, ok := tokens[s.Token]; ok && s.Token != "" {
			r.Fail(tokenVar, "the same as %s: each subscriber needs a token of its own, or one could forge deliveries to the other", other)
		}
		tokens[s.Token] = tokenVar
		for _, t := range strings.Split(r.Required(typesVar), ",") {
			t = strings.TrimSpace(t)
			switch {
			case r.Err() != nil:
			case t == "":
				r.Fail(typesVar, "an empty type: list event types separated by commas")
			case !slices.Contains(known, t):
				r.Fail(typesVar, "%q is not a type labeling publishes (%s)", t, strings.Join(known, ", "))
			case slices.Contains(s.Types, t):
				r.Fail(typesVar, "names %s twice", t)
			default:
				s.Types = append(s.Types, t)
			}
		}
		out = append(out, s)
	}
	return out
}

// consumerTypes reads NATS_CONSUMER_<NAME>_TYPES for each durable n of
// durables, looked up by its name (the environment is never scanned): a comma
// list of the types labeling publishes. A durable whose variable is unset (or
// empty) is absent from the map: its durable takes every type. Two durables
// whose names differ only in case share a variable, which then cannot say
// whose types it gives: refused when set.
func consumerTypes(r *env.Reader, durables []string) map[string][]string {
	known := labeling.Tags(labeling.Events())
	var out map[string][]string
	owner := map[string]string{}
	for _, n := range durables {
		name := ConsumerTypesVar(n)
		v := r.Str(name, "")
		if v == "" { // unset or empty, as every variable: every type
			continue
		}
		if other, ok := owner[name]; ok && other != n {
			r.Fail(name, "names both %s and %s of NATS_CONSUMERS; rename one of them", other, n)
			return nil
		}
		owner[name] = n
		var types []string
		for _, part := range strings.Split(v, ",") {
			part = strings.TrimSpace(part)
			switch {
			case part == "":
				r.Fail(name, "%q is not a list of event types separated by commas (%s)", v, strings.Join(known, ", "))
				return nil
			case !slices.Contains(known, part):
				r.Fail(name, "%q is not an event type labeling publishes (%s)", part, strings.Join(known, ", "))
				return nil
			case slices.Contains(types, part):
				r.Fail(name, "%q is listed twice", part)
				return nil
			}
			types = append(types, part)
		}
		if out == nil {
			out = map[string][]string{}
		}
		out[n] = types
	}
	return out
}

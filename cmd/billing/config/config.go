// Package config is the billing binary's loader: it reads billing's settings
// from the environment (contract section 1) with infra/env's readers, each
// value checked once where it is read, and every rule between two settings
// checked where the second is read, so a refusal is one line that starts
// with the variable to change. It lives beside cmd/billing, which alone runs
// it, in a package of its own rather than in package main because deploy's
// tests (the contract's defaults, the compose file) load it too.
package config

import (
	"time"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/infra/webhook"
)

// Billing is the configuration of the billing service: each component's
// Config, filled from the environment, and what the wiring needs besides.
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
	NATSIntake inbox.NATSConfig

	// ConsoleLabelingURL (CONSOLE_LABELING_URL) is the link from billing's
	// console to labeling's, or empty.
	ConsoleLabelingURL string
}

// Billing's defaults of its own: its listen address (HTTP_ADDR) and its
// database (DATABASE_URL: a SQLite file under the working directory,
// contract section 9). Every other default is a component's, read from it.
const (
	DefaultAddr     = ":8081"
	DefaultDatabase = "sqlite:data/billing.db"
)

// LoadBilling reads the billing configuration: the first refusal, one line
// naming the variable, is the error.
func LoadBilling(lookup env.Lookup) (Billing, error) {
	r := env.New(lookup)
	c := Billing{
		HTTP:               r.Web(DefaultAddr),
		Billing:            tokens(r),
		Cleanup:            r.Cleanup(),
		Bounds:             r.Bounds(),
		ConsoleLabelingURL: r.OptionalURL("CONSOLE_LABELING_URL", ""),
		Relay:              r.Relay(),
		Provider:           provider(r),
		NATS: stream.ConsumerConfig{
			URL:     r.NATSURL("NATS_URL"),
			AckWait: r.Duration("NATS_ACK_WAIT", stream.DefaultAckWait, stream.MaxAckWait),
		},
	}
	c.Billing.ApplyGroupMax = r.PositiveInt("BILLING_APPLY_GROUP_MAX", billing.DefaultApplyGroupMax, billing.MaxApplyGroupMax)
	c.NATS.Creds = r.File("NATS_CREDS")
	c.NATS.Durable = billing.Durable
	c.NATSIntake = inbox.NATSConfig{
		Key:            []byte(c.Billing.EventsToken),
		PreviousKey:    []byte(c.Billing.EventsTokenPrevious),
		MaxDeliveries:  uint64(r.PositiveInt("NATS_MAX_DELIVERIES", inbox.DefaultNATSMaxDeliveries, inbox.MaxNATSMaxDeliveries)),
		MaxFailedRows:  int64(r.PositiveInt("NATS_FAILED_MAX_ROWS", inbox.DefaultNATSFailedMaxRows, inbox.MaxNATSFailedMaxRows)),
		MaxFailedBytes: int64(r.PositiveInt("NATS_FAILED_MAX_BYTES", inbox.DefaultNATSFailedMaxBytes, inbox.MaxNATSFailedMaxBytes)),
	}
	c.DatabaseURL, c.DatabaseDefaulted = r.DatabaseURL(DefaultDatabase)
	return c, r.Err()
}

// tokens reads EVENTS_TOKEN (required), EVENTS_TOKEN_PREVIOUS (the old token
// during a rotation: a new token must differ from it) and
// RECEIPTS_RETENTION.
func tokens(r *env.Reader) billing.Config {
	c := billing.Config{
		EventsToken:         r.Token("EVENTS_TOKEN"),
		EventsTokenPrevious: r.OptionalToken("EVENTS_TOKEN_PREVIOUS"),
		ReceiptsRetention:   r.Duration("RECEIPTS_RETENTION", billing.DefaultReceiptsRetention, env.MaxDuration),
	}
	if c.EventsTokenPrevious != "" && c.EventsTokenPrevious == c.EventsToken {
		r.Fail("EVENTS_TOKEN_PREVIOUS", "equals EVENTS_TOKEN: a rotation needs a new token (or unset the previous one)")
	}
	return c
}

// provider reads PROVIDER_URL (an absolute http(s) URL, or unset: billing
// calls nothing) and PROVIDER_SECRET (webhook.ParseSecrets; required with
// PROVIDER_URL, checked whenever set). A bad secret is reported naming the
// variable and the position of the secret, never quoting it.
func provider(r *env.Reader) webhook.Config {
	c := webhook.Config{URL: r.OptionalURL("PROVIDER_URL", "")}
	secret := r.Str("PROVIDER_SECRET", "")
	if c.URL == "" && secret == "" {
		return c
	}
	if secret == "" {
		r.Fail("PROVIDER_SECRET", "required with PROVIDER_URL")
		return c
	}
	secrets, err := webhook.ParseSecrets(secret)
	if err != nil {
		r.Refuse(err)
		return c
	}
	c.Secrets = secrets
	return c
}

// Replay is what `billing nats replay` reads: the operator command's
// settings, and the keys and late-delivery bound of billing's intake, so a
// record is checked exactly as a delivery is.
type Replay struct {
	env.Command
	EventsToken         string
	EventsTokenPrevious string
	ReceiptsRetention   time.Duration
}

// LoadReplay reads DATABASE_URL, the DB_* bounds, EVENTS_TOKEN (required),
// EVENTS_TOKEN_PREVIOUS and RECEIPTS_RETENTION, with serve's rules for each.
func LoadReplay(lookup env.Lookup) (Replay, error) {
	r := env.New(lookup)
	c := Replay{Command: env.Command{Bounds: r.Bounds()}}
	t := tokens(r)
	c.EventsToken, c.EventsTokenPrevious, c.ReceiptsRetention = t.EventsToken, t.EventsTokenPrevious, t.ReceiptsRetention
	c.DatabaseURL, c.DatabaseDefaulted = r.DatabaseURL(DefaultDatabase)
	return c, r.Err()
}

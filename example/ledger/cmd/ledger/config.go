package main

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/cli"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
)

// The ledger's defaults: its database file, its listen address (loopback:
// its reads carry no authentication).
const (
	defaultDatabase = "sqlite:data/ledger.db"
	defaultAddr     = "127.0.0.1:8082"
)

// environment is the usage's configuration section.
var environment = []string{
	"DATABASE_URL: postgres://… or sqlite:PATH (default " + defaultDatabase + ")",
	"HTTP_ADDR: where to listen (default " + defaultAddr + "); GET /v1/entries has no authentication",
	"EVENTS_TOKEN: the Bearer token of POST /internal/v1/events and the key of signed NATS messages (required by serve)",
	"NATS_URL, NATS_CREDS, NATS_ACK_WAIT: consume LABELING_EVENTS as well, as billing does",
	"NATS_DURABLE: the durable's name (default " + ledger.Durable + ")",
	"FAILPOINTS: crash points, in a binary built with -tags failpoints",
}

// settings are what serve reads; the environment is read here, beside the
// binary, each rule checked once with the variable's name at hand.
type settings struct {
	DatabaseURL       string
	DatabaseDefaulted bool
	Addr              string
	EventsToken       string
	NATS              stream.ConsumerConfig
	NATSIntake        inbox.NATSConfig
}

// reader keeps the first error, so a caller reads every variable and checks once.
type reader struct {
	lookup cli.Lookup
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

// databaseURL is billing's rule: sqlite:PATH or a PostgreSQL URL, def when unset.
func (r *reader) databaseURL() (string, bool) {
	v := r.str("DATABASE_URL", "")
	switch {
	case v == "":
		return defaultDatabase, true
	case strings.HasPrefix(v, "sqlite:"):
		if _, err := sqldb.SQLitePath(v); err != nil {
			r.fail("DATABASE_URL", "%s", err)
		}
	default:
		if _, err := pgxpool.ParseConfig(v); err != nil {
			// The parse error may echo the password: name the variable only.
			r.fail("DATABASE_URL", "neither sqlite:PATH nor a valid PostgreSQL connection string")
		}
	}
	return v, false
}

// load reads serve's settings.
func load(lookup cli.Lookup) (settings, error) {
	r := &reader{lookup: lookup}
	var s settings
	s.DatabaseURL, s.DatabaseDefaulted = r.databaseURL()
	s.Addr = r.str("HTTP_ADDR", defaultAddr)
	s.EventsToken = r.str("EVENTS_TOKEN", "")
	if strings.TrimSpace(s.EventsToken) == "" {
		r.fail("EVENTS_TOKEN", "required but not set")
	}
	s.NATS = stream.ConsumerConfig{URL: r.str("NATS_URL", ""), Creds: r.str("NATS_CREDS", ""), Durable: r.str("NATS_DURABLE", ledger.Durable)}
	// TODO(natsfan): set Types: []string{ledger.EventType} on s.NATS once
	// stream.ConsumerConfig has it, so the durable receives RuleActivated only.
	if s.NATS.URL != "" {
		for _, part := range strings.Split(s.NATS.URL, ",") {
			u, err := url.Parse(strings.TrimSpace(part))
			if err != nil || u.Host == "" {
				r.fail("NATS_URL", "not a list of nats:// URLs separated by commas")
			}
		}
	}
	if v := r.str("NATS_ACK_WAIT", ""); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || d > stream.MaxAckWait {
			r.fail("NATS_ACK_WAIT", "%q is not a duration from 1ms to %s", v, stream.MaxAckWait)
		}
		s.NATS.AckWait = d
	}
	s.NATSIntake = inbox.NATSConfig{Key: []byte(s.EventsToken), MaxDeliveries: inbox.DefaultNATSMaxDeliveries,
		MaxFailedRows: inbox.DefaultNATSFailedMaxRows, MaxFailedBytes: inbox.DefaultNATSFailedMaxBytes}
	return s, r.err
}

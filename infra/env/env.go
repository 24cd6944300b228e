// Package env reads settings from environment variables, the services' only
// configuration source (contract section 1). A Reader checks each value once,
// where it reads it, against the rule and bound of the setting, and words a
// refusal as one line that starts with the variable's name; the binaries'
// loaders (cmd/labeling/config, cmd/billing/config) are built from its typed
// readers and from the settings both services read alike (settings.go). Vars
// is the one table of every variable each service reads. It imports no slice.
package env

import (
	"fmt"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/wire"
)

// Lookup reads one variable; os.LookupEnv fits. It is an alias of the plain
// function type, so infra/cli (which must not import this package) names the
// same type.
type Lookup = func(name string) (string, bool)

// Reader reads variables through a Lookup and keeps the first refusal, so a
// loader reads every setting and returns one error: "NAME: what is wrong".
// After a refusal it still looks every variable up, so a recording lookup
// sees them all; what it returns then is not to be used.
type Reader struct {
	lookup Lookup
	err    error
}

// New returns a Reader over lookup.
func New(lookup Lookup) *Reader { return &Reader{lookup: lookup} }

// Err is the first refusal, or nil.
func (r *Reader) Err() error { return r.err }

// Fail records "name: message" unless a refusal came first.
func (r *Reader) Fail(name, format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%s: %s", name, fmt.Sprintf(format, args...))
	}
}

// Refuse records err, which a component worded starting with the variable's
// name (webhook.ParseSecrets' "PROVIDER_SECRET: ..."), unless a refusal came
// first.
func (r *Reader) Refuse(err error) {
	if r.err == nil {
		r.err = err
	}
}

// Str is name's value, def when it is unset or empty.
func (r *Reader) Str(name, def string) string {
	if v, ok := r.lookup(name); ok && v != "" {
		return v
	}
	return def
}

// Required is name's value, refused when unset or empty.
func (r *Reader) Required(name string) string {
	v := r.Str(name, "")
	if v == "" {
		r.Fail(name, "required but not set")
	}
	return v
}

// Token reads a shared secret that must be set: a blank or whitespace-only
// value is refused, as a token anyone can guess (a stray space in an env file).
func (r *Reader) Token(name string) string {
	v := r.Required(name)
	if v != "" && strings.TrimSpace(v) == "" {
		r.Fail(name, "blank (only whitespace)")
	}
	return v
}

// OptionalToken reads a shared secret that may be unset, refused when set blank.
func (r *Reader) OptionalToken(name string) string {
	v := r.Str(name, "")
	if v != "" && strings.TrimSpace(v) == "" {
		r.Fail(name, "blank (only whitespace)")
	}
	return v
}

// DatabaseURL reads DATABASE_URL, def when unset (defaulted then reports
// true, for the start-up's log line): sqlite:PATH or a PostgreSQL URL.
func (r *Reader) DatabaseURL(def string) (v string, defaulted bool) {
	v = r.Str("DATABASE_URL", "")
	if v == "" {
		return def, true
	}
	if strings.HasPrefix(v, "sqlite:") {
		if _, err := sqldb.SQLitePath(v); err != nil {
			r.Fail("DATABASE_URL", "%s", err)
		}
		return v, false
	}
	if _, err := pgxpool.ParseConfig(v); err != nil {
		// The parse error may echo the password: name the variable only.
		r.Fail("DATABASE_URL", "neither sqlite:PATH nor a valid PostgreSQL connection string")
	}
	return v, false
}

// HTTPURL reads an http(s) URL with a host, def when unset. A refused one is
// quoted as wire.RedactURL quotes it, without the userinfo, query and
// fragment that may hold a credential.
func (r *Reader) HTTPURL(name, def string) string {
	v := r.Str(name, def)
	if !isHTTPURL(v) {
		r.Fail(name, "%q is not an http(s) URL", wire.RedactURL(v))
	}
	return v
}

// OptionalURL reads an http(s) URL or nothing (""); a set one must contain
// must. A refused one is quoted as HTTPURL quotes it, and read as "".
func (r *Reader) OptionalURL(name, must string) string {
	v := r.Str(name, "")
	if v == "" {
		return ""
	}
	if !isHTTPURL(v) {
		r.Fail(name, "%q is not an http(s) URL", wire.RedactURL(v))
		return ""
	}
	if !strings.Contains(v, must) {
		r.Fail(name, "%q does not contain %s", wire.RedactURL(v), must)
	}
	return v
}

func isHTTPURL(v string) bool {
	u, err := url.Parse(v)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != ""
}

// OneOf reads one of allowed, exactly as spelt there; def when unset.
func (r *Reader) OneOf(name, def string, allowed ...string) string {
	v := r.Str(name, def)
	for _, a := range allowed {
		if v == a {
			return v
		}
	}
	r.Fail(name, "%q is not one of %s", v, strings.Join(allowed, ", "))
	return def
}

// File reads the path of a file that must be readable now, or "".
func (r *Reader) File(name string) string {
	v := r.Str(name, "")
	if v == "" {
		return v
	}
	if _, err := os.ReadFile(v); err != nil {
		r.Fail(name, "%v", err)
		return ""
	}
	return v
}

// Names reads a list of NATS names (letters, digits, - and _) separated by
// commas, def when unset; none of them may be empty.
func (r *Reader) Names(name, def string) []string {
	v := r.Str(name, def)
	var out []string
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" || strings.Trim(part, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_") != "" {
			r.Fail(name, "%q is not a list of durable names (letters, digits, - and _) separated by commas", v)
			return nil
		}
		out = append(out, part)
	}
	return out
}

// NATSURL reads a NATS server list or nothing: one URL or several separated
// by commas, each nats://, tls://, ws:// or wss:// with a host.
func (r *Reader) NATSURL(name string) string {
	v := r.Str(name, "")
	if v == "" {
		return v
	}
	for _, part := range strings.Split(v, ",") {
		u, err := url.Parse(strings.TrimSpace(part))
		if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "tls" && u.Scheme != "ws" && u.Scheme != "wss") {
			// The URL may carry credentials: name the variable only.
			r.Fail(name, "not a list of nats:// (or tls://, ws://, wss://) URLs separated by commas")
			return ""
		}
	}
	return v
}

// Duration reads a positive Go duration (250ms, 30s, 5m) of at most limit,
// def when unset.
func (r *Reader) Duration(name string, def, limit time.Duration) time.Duration {
	v := r.Str(name, "")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		r.Fail(name, "%q is not a duration (use Go syntax: 250ms, 30s, 5m)", v)
		return def
	}
	switch {
	case d <= 0:
		r.Fail(name, "%q must be positive", v)
		return def
	case d > limit:
		r.Fail(name, "%q is more than the maximum of %s", v, limit)
		return def
	}
	return d
}

// Bool reads a boolean as strconv.ParseBool does (true, false, 1, 0, ...),
// def when unset.
func (r *Reader) Bool(name string, def bool) bool {
	v := r.Str(name, "")
	if v == "" {
		return def
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		r.Fail(name, "%q is not a boolean (true or false)", v)
		return def
	}
	return b
}

// PositiveInt reads a whole number from 1 to limit, def when unset.
func (r *Reader) PositiveInt(name string, def, limit int) int {
	v := r.Str(name, "")
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	switch {
	case err != nil || n <= 0:
		r.Fail(name, "%q is not a positive integer", v)
		return def
	case n > limit:
		r.Fail(name, "%q is more than the maximum of %d", v, limit)
		return def
	}
	return n
}

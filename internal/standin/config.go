// Package standin is the stand-in provider (cmd/provider): an outside service
// that billing's outbox calls (infra/webhook), small enough to read in one
// sitting, doing what docs/calling-the-outside-world.md asks of any provider:
// it verifies each request's Standard Webhooks signature with the Standard
// Webhooks library, applies each Idempotency-Key once, durably and atomically
// with its effect (a SQLite file), answers 2xx only after that commit (for a
// duplicate too), and counts what it applied (GET /applied), so that a test
// can check that every quota change reached it exactly once however often it
// was called.
package standin

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/acme/outboxpair/infra/webhook"
)

const (
	// DefaultAddr is where the stand-in listens without PROVIDER_ADDR: loopback,
	// beside labeling (8080) and billing (8081); 8090 is the compose file's
	// token issuer.
	DefaultAddr = "127.0.0.1:8082"
	// DefaultDB is its SQLite file without PROVIDER_DB, under the working
	// directory as the services' default files are.
	DefaultDB = "data/provider.db"
	// Path is where it receives calls: PROVIDER_URL is http://ADDR/webhook.
	Path = "/webhook"
)

// Vars are the variables the stand-in reads, every one of them.
var Vars = []string{"PROVIDER_ADDR", "PROVIDER_SECRET", "PROVIDER_DB", "PROVIDER_FAIL_EVERY"}

// Config is the stand-in's settings.
type Config struct {
	Addr string // PROVIDER_ADDR, host:port
	// Secret is the first secret of PROVIDER_SECRET, the one it verifies with:
	// a provider knows one secret; the sender signs with each of its secrets
	// during a rotation, so either side may switch first.
	Secret string
	DB     string // PROVIDER_DB, a file path
	// FailEvery, when positive, answers 503 to every FailEvery-th call after
	// applying it (PROVIDER_FAIL_EVERY): an answer lost after the commit, as a
	// crash between the two would lose it, so the sender calls again and the
	// stand-in absorbs the duplicate. For tests; 0 (the default) is off.
	FailEvery int
}

// Load reads the stand-in's variables through lookup. A bad value is an
// error naming its variable, never quoting a secret.
func Load(lookup func(string) (string, bool)) (Config, error) {
	get := func(name, def string) string {
		if v, ok := lookup(name); ok && strings.TrimSpace(v) != "" {
			return strings.TrimSpace(v)
		}
		return def
	}
	c := Config{Addr: get("PROVIDER_ADDR", DefaultAddr), DB: get("PROVIDER_DB", DefaultDB)}
	secret, _ := lookup("PROVIDER_SECRET")
	secrets, err := webhook.ParseSecrets(secret)
	if err != nil {
		return Config{}, err
	}
	c.Secret = secrets[0]
	if _, _, err := splitAddr(c.Addr); err != nil {
		return Config{}, fmt.Errorf("PROVIDER_ADDR: %q is not host:port: %w", c.Addr, err)
	}
	if strings.ContainsAny(c.DB, "?#%") || c.DB == ":memory:" || strings.HasPrefix(c.DB, "file:") {
		return Config{}, fmt.Errorf("PROVIDER_DB: %q: a file path only", c.DB)
	}
	if v := get("PROVIDER_FAIL_EVERY", "0"); v != "0" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return Config{}, errors.New("PROVIDER_FAIL_EVERY: " + strconv.Quote(v) + " is not a whole number of calls (0 is off)")
		}
		c.FailEvery = n
	}
	return c, nil
}

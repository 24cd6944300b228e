package env_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/outbox"
)

// Each reader refuses a bad value in one line that starts with the
// variable's name, and the reader keeps the first refusal only.
func TestReadersNameTheVariable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		value string
		read  func(r *env.Reader)
		want  string
	}{
		{"", func(r *env.Reader) { r.Required("V") }, "V: required but not set"},
		{" \t", func(r *env.Reader) { r.Token("V") }, "V: blank (only whitespace)"},
		{" ", func(r *env.Reader) { r.OptionalToken("V") }, "V: blank (only whitespace)"},
		{"ftp://u:pw@h:21/p?token=s#f", func(r *env.Reader) { r.HTTPURL("V", "") }, `V: "ftp://h:21/p" is not an http(s) URL`},
		{"h:1", func(r *env.Reader) { r.OptionalURL("V", "") }, `V: "h:1" is not an http(s) URL`},
		{"http://u:pw@h/t?k=s", func(r *env.Reader) { r.OptionalURL("V", "{trace}") }, `V: "http://h/t" does not contain {trace}`},
		{"Nats", func(r *env.Reader) { r.OneOf("V", "http", "http", "nats") }, `V: "Nats" is not one of http, nats`},
		{filepath.Join(dir, "absent"), func(r *env.Reader) { r.File("V") }, "V: open " + filepath.Join(dir, "absent") + ": no such file or directory"},
		{"a,,b", func(r *env.Reader) { r.Names("V", "") }, `V: "a,,b" is not a list of durable names (letters, digits, - and _) separated by commas`},
		{"a.b", func(r *env.Reader) { r.Names("V", "") }, `V: "a.b" is not a list of durable names (letters, digits, - and _) separated by commas`},
		{"nats://u:pw@a:1,b:2", func(r *env.Reader) { r.NATSURL("V") }, "V: not a list of nats:// (or tls://, ws://, wss://) URLs separated by commas"},
		{"5", func(r *env.Reader) { r.Duration("V", time.Second, time.Hour) }, `V: "5" is not a duration (use Go syntax: 250ms, 30s, 5m)`},
		{"0s", func(r *env.Reader) { r.Duration("V", time.Second, time.Hour) }, `V: "0s" must be positive`},
		{"61m", func(r *env.Reader) { r.Duration("V", time.Second, time.Hour) }, `V: "61m" is more than the maximum of 1h0m0s`},
		{"yes", func(r *env.Reader) { r.Bool("V", false) }, `V: "yes" is not a boolean (true or false)`},
		{"0", func(r *env.Reader) { r.PositiveInt("V", 1, 10) }, `V: "0" is not a positive integer`},
		{"ten", func(r *env.Reader) { r.PositiveInt("V", 1, 10) }, `V: "ten" is not a positive integer`},
		{"11", func(r *env.Reader) { r.PositiveInt("V", 1, 10) }, `V: "11" is more than the maximum of 10`},
	} {
		r := env.New(lookup(map[string]string{"V": tc.value, "W": "x"}))
		tc.read(r)
		r.Duration("W", time.Second, time.Hour) // a later refusal is not kept
		require.EqualError(t, r.Err(), tc.want, "%q", tc.value)
		require.NotContains(t, r.Err().Error(), "pw")
	}
}

// Unset or empty, a variable is its default, and nothing is refused.
func TestReadersDefaults(t *testing.T) {
	t.Parallel()
	r := env.New(lookup(map[string]string{"EMPTY": ""}))
	require.Equal(t, "d", r.Str("EMPTY", "d"))
	require.Equal(t, "http://d", r.HTTPURL("UNSET", "http://d"))
	require.Empty(t, r.OptionalURL("UNSET", "{trace}"))
	require.Equal(t, "http", r.OneOf("UNSET", "http", "http", "nats"))
	require.Empty(t, r.File("UNSET"))
	require.Equal(t, []string{"billing"}, r.Names("UNSET", "billing"))
	require.Empty(t, r.NATSURL("UNSET"))
	require.Equal(t, time.Second, r.Duration("UNSET", time.Second, time.Hour))
	require.True(t, r.Bool("UNSET", true))
	require.Equal(t, 3, r.PositiveInt("UNSET", 3, 10))
	require.Empty(t, r.OptionalToken("UNSET"))
	url, defaulted := r.DatabaseURL("sqlite:data/x.db")
	require.Equal(t, "sqlite:data/x.db", url)
	require.True(t, defaulted)
	require.NoError(t, r.Err())

	creds := filepath.Join(t.TempDir(), "nats.creds")
	require.NoError(t, os.WriteFile(creds, []byte("creds"), 0o600))
	r = env.New(lookup(map[string]string{"CREDS": creds, "NATS": "nats://a:1, tls://b:2", "NAMES": "billing, e2e-audit,audit_2"}))
	require.Equal(t, creds, r.File("CREDS"))
	require.Equal(t, "nats://a:1, tls://b:2", r.NATSURL("NATS"))
	require.Equal(t, []string{"billing", "e2e-audit", "audit_2"}, r.Names("NAMES", ""))
	require.NoError(t, r.Err())
}

// Relay reads the OUTBOX_* variables with the relay's defaults, and words
// the rules between them with the variables' names.
func TestRelay(t *testing.T) {
	t.Parallel()
	r := env.New(lookup(nil))
	require.Equal(t, outbox.DefaultConfig(), r.Relay())
	require.NoError(t, r.Err())

	for _, tc := range []struct {
		kv   map[string]string
		want string
	}{
		{map[string]string{"OUTBOX_RETRY_MAX": "1s"}, "OUTBOX_RETRY_MAX: 1s is less than OUTBOX_RETRY_BASE (5s)"},
		{map[string]string{"OUTBOX_LEASE": "999ms"}, "OUTBOX_LEASE: 999ms is less than the minimum of 1s (a fifth of the lease is kept for recording each outcome)"},
		{map[string]string{"OUTBOX_LEASE": "29s"}, "OUTBOX_LEASE: 29s is shorter than OUTBOX_HANDLER_TIMEOUT (30s): a claim takes no more rows than OUTBOX_WORKERS has free, so each claimed row starts at once and must finish within the lease"},
		{map[string]string{"OUTBOX_CLAIM_SIZE": "1001"}, `OUTBOX_CLAIM_SIZE: "1001" is more than the maximum of 1000`},
		{map[string]string{"OUTBOX_WORKERS": "0"}, `OUTBOX_WORKERS: "0" is not a positive integer`},
	} {
		r := env.New(lookup(tc.kv))
		r.Relay()
		require.EqualError(t, r.Err(), tc.want)
	}

	r = env.New(lookup(map[string]string{"OUTBOX_NOTIFY": "false", "OUTBOX_WORKERS": "7", "OUTBOX_LEASE": "24h", "OUTBOX_HANDLER_TIMEOUT": "24h"}))
	c := r.Relay()
	require.NoError(t, r.Err())
	require.False(t, c.Notify)
	require.Equal(t, 7, c.Workers)
	require.NoError(t, c.Validate(), "what Relay accepts, the relay accepts")
}

// The settings both services read alike have the components' defaults.
func TestSharedSettingsDefaults(t *testing.T) {
	t.Parallel()
	r := env.New(lookup(nil))
	w := r.Web(":8080")
	require.Equal(t, ":8080", w.Addr)
	require.Equal(t, 8*time.Second, w.RequestTimeout)
	require.False(t, w.SecureCookies)
	require.Equal(t, time.Hour, r.Cleanup().Interval)
	b := r.Bounds()
	require.Equal(t, 5*time.Second, b.StatementTimeout)
	require.Equal(t, 2*time.Second, b.LockTimeout)
	require.NoError(t, r.Err())
	require.True(t, strings.HasPrefix(env.ServeAddr(lookup(nil), ":8080", true), env.LoopbackHost+":"))
	require.Equal(t, ":8080", env.ServeAddr(lookup(nil), ":8080", false))
	require.Equal(t, ":9", env.ServeAddr(lookup(map[string]string{"HTTP_ADDR": ":9"}), ":8080", true))
	require.Equal(t, ":8081", env.LoadHTTPAddr(lookup(nil), ":8081"))
}

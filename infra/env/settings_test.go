package env_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/env"
)

// labelingDatabase is labeling's DATABASE_URL default, a service's default
// as LoadCommand takes it.
const labelingDatabase = "sqlite:data/labeling.db"

func lookup(kv map[string]string) env.Lookup {
	return func(name string) (string, bool) {
		v, ok := kv[name]
		return v, ok
	}
}

func TestLoadAuth(t *testing.T) {
	t.Parallel()
	on := map[string]string{
		"AUTH_JWKS_URL": "http://oauth:8090/outboxpair/jwks",
		"AUTH_ISSUER":   "http://localhost:8090/outboxpair",
		"AUTH_AUDIENCE": "outboxpair",
	}

	t.Run("the three variables turn authentication on", func(t *testing.T) {
		t.Parallel()
		c, err := env.LoadAuth(lookup(on))
		require.NoError(t, err)
		require.Equal(t, env.Auth{JWKSURL: on["AUTH_JWKS_URL"], Issuer: on["AUTH_ISSUER"], Audience: on["AUTH_AUDIENCE"]}, c)
	})

	t.Run("AUTH_DISABLED=true alone turns it off", func(t *testing.T) {
		t.Parallel()
		c, err := env.LoadAuth(lookup(map[string]string{"AUTH_DISABLED": "true"}))
		require.NoError(t, err)
		require.True(t, c.Disabled)
	})

	t.Run("AUTH_DISABLED=false with the three variables is on", func(t *testing.T) {
		t.Parallel()
		kv := map[string]string{"AUTH_DISABLED": "false"}
		for k, v := range on {
			kv[k] = v
		}
		c, err := env.LoadAuth(lookup(kv))
		require.NoError(t, err)
		require.False(t, c.Disabled)
	})

	bad := []struct {
		name     string
		kv       map[string]string
		variable string
	}{
		{"nothing set never leaves the API open", map[string]string{}, "AUTH_JWKS_URL"},
		{"AUTH_DISABLED=false alone", map[string]string{"AUTH_DISABLED": "false"}, "AUTH_JWKS_URL"},
		{"AUTH_DISABLED not a boolean", map[string]string{"AUTH_DISABLED": "yes please"}, "AUTH_DISABLED"},
		{"both disabled and a JWKS URL", map[string]string{"AUTH_DISABLED": "true", "AUTH_JWKS_URL": on["AUTH_JWKS_URL"]}, "AUTH_DISABLED"},
		{"a JWKS URL without an issuer", map[string]string{"AUTH_JWKS_URL": on["AUTH_JWKS_URL"], "AUTH_AUDIENCE": "a"}, "AUTH_ISSUER"},
		{"a JWKS URL without an audience", map[string]string{"AUTH_JWKS_URL": on["AUTH_JWKS_URL"], "AUTH_ISSUER": "i"}, "AUTH_AUDIENCE"},
		{"a JWKS URL that is not http(s)", map[string]string{"AUTH_JWKS_URL": "oauth:8090/jwks", "AUTH_ISSUER": "i", "AUTH_AUDIENCE": "a"}, "AUTH_JWKS_URL"},
	}
	for _, tc := range bad {
		t.Run("rejects "+tc.name+" naming "+tc.variable, func(t *testing.T) {
			t.Parallel()
			_, err := env.LoadAuth(lookup(tc.kv))
			require.Error(t, err)
			require.True(t, strings.HasPrefix(err.Error(), tc.variable+": "), err.Error())
			require.NotContains(t, err.Error(), "\n")
		})
	}

	t.Run("the services' variable lists name the AUTH_* variables", func(t *testing.T) {
		t.Parallel()
		for _, name := range env.AuthVars {
			require.Contains(t, env.LabelingVars, name)
			require.Contains(t, env.BillingVars, name)
		}
	})
}

// Contract section 1: the operator commands read only DATABASE_URL and the DB_*
// bounds, so a setting meant for serve (a bad one too) never stops them.
func TestLoadCommandReadsOnlyTheDatabase(t *testing.T) {
	t.Parallel()
	var asked []string
	c, err := env.LoadCommand(func(name string) (string, bool) {
		asked = append(asked, name)
		return map[string]string{"HTTP_REQUEST_TIMEOUT": "bogus", "EVENTS_TOKEN": "", "DB_LOCK_TIMEOUT": "3s"}[name], name != "DATABASE_URL"
	}, labelingDatabase)
	require.NoError(t, err, "HTTP_REQUEST_TIMEOUT is serve's: a command never reads it")
	require.ElementsMatch(t, []string{"DATABASE_URL", "DB_STATEMENT_TIMEOUT", "DB_LOCK_TIMEOUT"}, asked)
	require.Equal(t, 3*time.Second, c.LockTimeout)
	require.Equal(t, labelingDatabase, c.DatabaseURL)
}

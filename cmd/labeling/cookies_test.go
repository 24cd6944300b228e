package main

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
	"github.com/acme/outboxpair/migrations"
)

// TestConsoleSecureCookiesSetting: CONSOLE_SECURE_COOKIES=true reaches the
// server of the real binary, whose console then sets its cookies Secure over
// plain HTTP (a proxy in front terminates TLS); unset, they are not.
func TestConsoleSecureCookiesSetting(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t, migrations.Labeling)
	for _, on := range []string{"", "true"} {
		env := baseEnv(db.URL)
		if on != "" {
			env["CONSOLE_SECURE_COOKIES"] = on
		}
		p := proctest.Start(t, binary(t, ""), env, "serve")
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + p.ListenAddr(t) + "/console/")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		var csrf *http.Cookie
		for _, ck := range resp.Cookies() {
			if ck.Name == "console_csrf" {
				csrf = ck
			}
		}
		require.NotNil(t, csrf)
		require.Equal(t, on == "true", csrf.Secure, "CONSOLE_SECURE_COOKIES=%q", on)
	}
}

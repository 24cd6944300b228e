package main

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/authtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
)

func TestServeAuthentication(t *testing.T) {
	t.Parallel()

	t.Run("by default /v1 needs a token from AUTH_JWKS_URL's issuer; the probes stay open", func(t *testing.T) {
		t.Parallel()
		iss := authtest.New(t)
		s := startServer(t, env("DATABASE_URL="+pgtest.Empty(t).URL, "EVENTS_TOKEN=x", "HTTP_ADDR=127.0.0.1:0",
			"AUTH_JWKS_URL="+iss.JWKSURL(), "AUTH_ISSUER="+authtest.IssuerURL, "AUTH_AUDIENCE="+authtest.Audience))
		base := "http://" + s.addr
		client := &http.Client{Timeout: 10 * time.Second}
		// The status and headers only: the body is read and closed here.
		get := func(path, token string) (int, http.Header) {
			req, err := http.NewRequest(http.MethodGet, base+path, nil)
			require.NoError(t, err)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := client.Do(req)
			require.NoError(t, err)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			return resp.StatusCode, resp.Header
		}
		status := func(path, token string) int { code, _ := get(path, token); return code }
		org := uuid.NewString()
		code, header := get("/v1/orgs/"+org+"/quota", "")
		require.Equal(t, http.StatusUnauthorized, code)
		require.True(t, strings.HasPrefix(header.Get("WWW-Authenticate"), "Bearer"))
		require.Equal(t, http.StatusOK, status("/v1/orgs/"+org+"/quota", iss.For(t, org)))
		require.Equal(t, http.StatusNotFound, status("/v1/orgs/"+org+"/quota", iss.For(t, uuid.NewString())))
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			require.Equal(t, http.StatusOK, status(path, ""), path)
		}
		require.Equal(t, 0, s.stop(t), s.Stderr.String())
		for _, line := range s.LogLines(t) {
			require.NotEqual(t, "WARN", line["level"], "no warning with auth on: %v", line)
		}
	})

	t.Run("AUTH_DISABLED=true serves /v1 open and logs one warning", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, env("DATABASE_URL="+pgtest.Empty(t).URL, "EVENTS_TOKEN=x", "HTTP_ADDR=127.0.0.1:0", "AUTH_DISABLED=true"))
		resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + s.addr + "/v1/orgs/" + uuid.NewString() + "/quota")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Equal(t, 0, s.stop(t), s.Stderr.String())
		warnings := 0
		for _, line := range s.LogLines(t) {
			if line["level"] == "WARN" && strings.Contains(line["msg"].(string), "AUTH_DISABLED") {
				warnings++
			}
		}
		require.Equal(t, 1, warnings)
	})

	oneLine := func(t *testing.T, r result, names ...string) {
		t.Helper()
		require.Equal(t, 1, r.code, r.stderr)
		require.True(t, strings.HasPrefix(r.stderr, "billing: "), r.stderr)
		for _, name := range names {
			require.Contains(t, r.stderr, name)
		}
		require.Equal(t, 1, strings.Count(r.stderr, "\n"), r.stderr)
	}
	base := []string{"DATABASE_URL=postgres://postgres@127.0.0.1:1/x", "EVENTS_TOKEN=x", "HTTP_ADDR=127.0.0.1:0"}

	t.Run("serve without AUTH_JWKS_URL or AUTH_DISABLED stops with one line naming them", func(t *testing.T) {
		t.Parallel()
		oneLine(t, runCmd(t, env(base...), "serve"), "AUTH_JWKS_URL", "AUTH_ISSUER", "AUTH_AUDIENCE", "AUTH_DISABLED")
	})

	t.Run("AUTH_JWKS_URL without AUTH_ISSUER or AUTH_AUDIENCE stops naming the missing one", func(t *testing.T) {
		t.Parallel()
		oneLine(t, runCmd(t, env(append(base, "AUTH_JWKS_URL=http://issuer/jwks", "AUTH_AUDIENCE=a")...), "serve"), "AUTH_ISSUER")
		oneLine(t, runCmd(t, env(append(base, "AUTH_JWKS_URL=http://issuer/jwks", "AUTH_ISSUER=i")...), "serve"), "AUTH_AUDIENCE")
	})

	t.Run("migrate and healthcheck need no AUTH_* variable", func(t *testing.T) {
		t.Parallel()
		r := runCmd(t, env("DATABASE_URL="+pgtest.Empty(t).URL, "EVENTS_TOKEN=x"), "migrate")
		require.Equal(t, 0, r.code, r.stderr)
	})
}

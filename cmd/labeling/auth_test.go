package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/authtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
	"github.com/acme/outboxpair/migrations"
)

func TestServeAuthentication(t *testing.T) {
	t.Parallel()

	t.Run("by default /v1 needs a token from AUTH_JWKS_URL's issuer and writes nothing without one", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t, migrations.Labeling)
		iss := authtest.New(t)
		env := baseEnv(db.URL)
		delete(env, "AUTH_DISABLED")
		env["AUTH_JWKS_URL"], env["AUTH_ISSUER"], env["AUTH_AUDIENCE"] = iss.JWKSURL(), authtest.IssuerURL, authtest.Audience
		p := proctest.Start(t, binary(t, ""), env, "serve")
		base := "http://" + p.ListenAddr(t)
		client := &http.Client{Timeout: 5 * time.Second}
		post := func(path, body, token string) int {
			req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Content-Type", "application/json")
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := client.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			return resp.StatusCode
		}
		org, id := uuid.NewString(), uuid.NewString()
		body := fmt.Sprintf(`{"id":%q,"name":"n","pattern":"p","label":"l"}`, id)
		require.Equal(t, http.StatusUnauthorized, post("/v1/orgs/"+org+"/rules", body, ""))
		require.Equal(t, http.StatusNotFound, post("/v1/orgs/"+org+"/rules", body, iss.For(t, uuid.NewString())))
		var n int
		require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM labeling_rules`).Scan(&n))
		require.Zero(t, n)
		require.Equal(t, http.StatusCreated, post("/v1/orgs/"+org+"/rules", body, iss.For(t, org)))
	})

	t.Run("serve without AUTH_JWKS_URL or AUTH_DISABLED stops with one line naming them", func(t *testing.T) {
		t.Parallel()
		code, _, stderr := runCLI(map[string]string{"DATABASE_URL": "postgres://h/db", "EVENTS_TOKEN": "t"}, "serve")
		require.Equal(t, exitFail, code)
		require.True(t, strings.HasPrefix(stderr, "labeling: AUTH_JWKS_URL: "), stderr)
		for _, name := range []string{"AUTH_ISSUER", "AUTH_AUDIENCE", "AUTH_DISABLED=true"} {
			require.Contains(t, stderr, name)
		}
		require.Equal(t, 1, strings.Count(stderr, "\n"))
	})
}

package main

import (
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/internal/testsupport/authtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
	"github.com/acme/outboxpair/migrations"
)

// TestHugeBodiesWriteNothingAndHoldLittle posts 50 MB bodies, a multipart
// form first, to the real binary with authentication on, as a stranger: to
// the console's sign-in (public by design) and to the API. Each is refused
// unread (415 for multipart), no file appears in the process's TMPDIR and its
// peak RSS grows by less than 64 MiB. Before issue 32 the console parsed the
// multipart form before anything else and left a 50 MB multipart-* file.
// PostgreSQL, so that no SQLite temporary file shares the TMPDIR.
func TestHugeBodiesWriteNothingAndHoldLittle(t *testing.T) {
	t.Parallel()
	iss := authtest.New(t)
	tmp := t.TempDir()
	env := baseEnv(pgtest.New(t, migrations.Labeling).URL)
	delete(env, "AUTH_DISABLED")
	env["AUTH_JWKS_URL"], env["AUTH_ISSUER"], env["AUTH_AUDIENCE"] = iss.JWKSURL(), authtest.IssuerURL, authtest.Audience
	env["TMPDIR"] = tmp
	p := proctest.Start(t, binary(t, ""), env, "serve")
	base := "http://" + p.ListenAddr(t)
	for _, path := range []string{"/console/login", "/v1/orgs/" + uuid.NewString() + "/rules"} {
		t.Run(path, func(t *testing.T) {
			proctest.RequireBodiesBounded(t, p, base+path, tmp, http.StatusUnsupportedMediaType)
		})
	}
}

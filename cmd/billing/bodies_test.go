package main

import (
	"net/http"
	"testing"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/internal/testsupport/authtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// TestHugeBodiesWriteNothingAndHoldLittle posts 50 MB bodies, a multipart
// form first, to the real binary with authentication on, as a stranger: to
// the console's sign-in (public by design), the event intake and the API.
// Each is refused unread (415 for multipart), no file appears in the
// process's TMPDIR and its peak RSS grows by less than 64 MiB. Before issue
// 32 the console parsed the multipart form before anything else and left a
// 50 MB multipart-* file. PostgreSQL, so that no SQLite temporary file shares
// the TMPDIR.
func TestHugeBodiesWriteNothingAndHoldLittle(t *testing.T) {
	t.Parallel()
	iss := authtest.New(t)
	tmp := t.TempDir()
	s := startServer(t, env("DATABASE_URL="+pgtest.Empty(t).URL, "EVENTS_TOKEN=x", "HTTP_ADDR=127.0.0.1:0", "TMPDIR="+tmp,
		"AUTH_JWKS_URL="+iss.JWKSURL(), "AUTH_ISSUER="+authtest.IssuerURL, "AUTH_AUDIENCE="+authtest.Audience))
	base := "http://" + s.addr
	for _, path := range []string{"/console/login", "/internal/v1/events", "/v1/orgs/" + uuid.NewString() + "/quota"} {
		t.Run(path, func(t *testing.T) {
			proctest.RequireBodiesBounded(t, s.Process, base+path, tmp, http.StatusUnsupportedMediaType)
		})
	}
}

package main

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/pgtest"
)

// The binary passes EVENTS_TOKEN_PREVIOUS to the intake, and refuses a blank one.
func TestServeTokenRotation(t *testing.T) {
	t.Parallel()

	t.Run("accepts the previous token beside the current one, and no other", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, env("DATABASE_URL="+pgtest.Empty(t).URL, "EVENTS_TOKEN=new-token",
			"EVENTS_TOKEN_PREVIOUS=old-token", "HTTP_ADDR=127.0.0.1:0", "AUTH_DISABLED=true"))
		client := &http.Client{Timeout: 10 * time.Second}
		deliver := func(tok string) int {
			id := uuid.Must(uuid.NewV7())
			body := fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":`+occurredNow()+`,"payload":{"orgId":%q,"ruleId":%q}}`, id, uuid.New(), uuid.New())
			req, err := http.NewRequest(http.MethodPost, "http://"+s.addr+"/internal/v1/events", strings.NewReader(body))
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+tok)
			req.Header.Set("Content-Type", "application/json")
			resp, err := client.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			return resp.StatusCode
		}
		require.Equal(t, http.StatusNoContent, deliver("old-token"))
		require.Equal(t, http.StatusNoContent, deliver("new-token"))
		require.Equal(t, http.StatusUnauthorized, deliver("other-token"))
		require.Equal(t, 0, s.stop(t), s.Stderr.String())
	})

	for name, vars := range map[string][]string{
		"a blank EVENTS_TOKEN":                           {"EVENTS_TOKEN= "},
		"a blank EVENTS_TOKEN_PREVIOUS":                  {"EVENTS_TOKEN=t", "EVENTS_TOKEN_PREVIOUS=\t"},
		"an EVENTS_TOKEN_PREVIOUS equal to EVENTS_TOKEN": {"EVENTS_TOKEN=t", "EVENTS_TOKEN_PREVIOUS=t"},
	} {
		t.Run("refuses to start with "+name+", in one line naming it", func(t *testing.T) {
			t.Parallel()
			variable := strings.SplitN(vars[len(vars)-1], "=", 2)[0]
			r := runCmd(t, env(append([]string{"DATABASE_URL=postgres://x@127.0.0.1:1/x", "HTTP_ADDR=127.0.0.1:0", "AUTH_DISABLED=true"}, vars...)...), "serve")
			require.Equal(t, 1, r.code, r.stderr)
			require.Contains(t, r.stderr, variable)
			require.Equal(t, 1, strings.Count(strings.TrimSpace(r.stderr), "\n")+1, r.stderr)
		})
	}
}

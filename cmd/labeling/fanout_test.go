package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
	"github.com/acme/outboxpair/migrations"
)

// intake is an HTTP subscriber stand-in: it accepts the deliveries that carry
// its token (204) and records each one's id and type; refuse makes it answer
// 400 instead, as a subscriber does to a body it cannot apply.
type intake struct {
	mu     sync.Mutex
	got    []string // "type id"
	wrong  int      // deliveries with another token
	server *httptest.Server
}

func newIntake(t *testing.T, token string, refuse bool) *intake {
	t.Helper()
	in := &intake{}
	in.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var env struct{ ID, Type string }
		_ = json.NewDecoder(r.Body).Decode(&env)
		in.mu.Lock()
		defer in.mu.Unlock()
		switch {
		case r.Header.Get("Authorization") != "Bearer "+token:
			in.wrong++
			w.WriteHeader(http.StatusUnauthorized)
		case refuse:
			w.WriteHeader(http.StatusBadRequest)
		default:
			require.Equal(t, env.ID, r.Header.Get("Idempotency-Key"))
			in.got = append(in.got, env.Type+" "+env.ID)
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(in.server.Close)
	return in
}

func (in *intake) deliveries() []string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]string(nil), in.got...)
}

func TestServeFansOut(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("billing gets every event, ledger only RuleActivated with the same id, and search's refusals are its own dead letters", func(t *testing.T) {
			t.Parallel()
			dbURL := "sqlite:" + filepath.Join(t.TempDir(), "labeling.db")
			if d == sqldb.Postgres {
				dbURL = pgtest.New(t, migrations.Labeling).URL
			}
			billing := newIntake(t, "test-token", false)
			ledger := newIntake(t, "ledger-token", false)
			search := newIntake(t, "search-token", true)
			env := baseEnv(dbURL)
			env["BILLING_URL"] = billing.server.URL
			env["SUBSCRIBERS"] = "ledger,search"
			env["SUBSCRIBER_LEDGER_URL"] = ledger.server.URL
			env["SUBSCRIBER_LEDGER_TOKEN"] = "ledger-token"
			env["SUBSCRIBER_LEDGER_TYPES"] = "RuleActivated"
			env["SUBSCRIBER_SEARCH_URL"] = search.server.URL
			env["SUBSCRIBER_SEARCH_TOKEN"] = "search-token"
			env["SUBSCRIBER_SEARCH_TYPES"] = "RuleDeactivated"
			bin := binary(t, "")
			p := proctest.Start(t, bin, env, "serve")
			base := "http://" + p.ListenAddr(t)
			post := poster(t, base)
			org, id := uuid.NewString(), uuid.NewString()
			require.Equal(t, http.StatusCreated, post("/v1/orgs/"+org+"/rules", fmt.Sprintf(`{"id":%q,"name":"n","pattern":"p","label":"l"}`, id)))
			require.Equal(t, http.StatusOK, post("/v1/orgs/"+org+"/rules/"+id+"/activate", ""))
			require.Equal(t, http.StatusOK, post("/v1/orgs/"+org+"/rules/"+id+"/deactivate", ""))

			require.Eventually(t, func() bool { return len(billing.deliveries()) == 2 && len(ledger.deliveries()) == 1 },
				30*time.Second, 20*time.Millisecond)
			var activated string
			for _, dlv := range billing.deliveries() {
				if strings.HasPrefix(dlv, "RuleActivated ") {
					activated = dlv
				}
			}
			require.NotEmpty(t, activated, "billing got RuleActivated: %v", billing.deliveries())
			require.Equal(t, []string{activated}, ledger.deliveries(), "ledger: RuleActivated alone, with billing's id")
			for _, in := range []*intake{billing, ledger, search} {
				require.Zero(t, in.wrong, "each subscriber is sent its own token")
			}

			// search answered 400: its row is dead-lettered, and outbox failed
			// says whose it is, in the last column.
			cmdEnv := map[string]string{"DATABASE_URL": dbURL}
			var out string
			require.Eventually(t, func() bool {
				code, stdout, _ := runCLI(cmdEnv, "outbox", "failed")
				out = stdout
				return code == exitOK && strings.Count(stdout, "\n") == 1
			}, 30*time.Second, 50*time.Millisecond)
			cols := strings.Split(strings.TrimSuffix(out, "\n"), "\t")
			require.Len(t, cols, 6, out)
			require.Equal(t, "RuleDeactivated", cols[1])
			require.Equal(t, "search", cols[5])
			require.Len(t, billing.deliveries(), 2, "billing is not held back nor sent anything again")

			p.Signal(t, syscall.SIGTERM)
			require.Equal(t, 0, p.Wait(t, 30*time.Second).ExitCode(), p.Stderr.String())
		})
	})

	t.Run("SUBSCRIBERS with EVENTS_TRANSPORT=nats stops start-up with one line naming it", func(t *testing.T) {
		t.Parallel()
		env := baseEnv("postgres://postgres@127.0.0.1:1/none")
		env["EVENTS_TRANSPORT"] = "nats"
		env["NATS_URL"] = "nats://127.0.0.1:1"
		env["SUBSCRIBERS"] = "ledger"
		env["SUBSCRIBER_LEDGER_URL"] = "http://127.0.0.1:1"
		env["SUBSCRIBER_LEDGER_TOKEN"] = "ledger-token"
		env["SUBSCRIBER_LEDGER_TYPES"] = "RuleActivated"
		p := proctest.Start(t, binary(t), env)
		require.Equal(t, exitFail, p.Wait(t, 30*time.Second).ExitCode())
		lines := strings.Split(strings.TrimSpace(p.Stderr.String()), "\n")
		require.Len(t, lines, 1, p.Stderr.String())
		require.True(t, strings.HasPrefix(lines[0], "labeling: SUBSCRIBERS: "), lines[0])
	})
}

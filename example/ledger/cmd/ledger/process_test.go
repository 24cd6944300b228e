package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

func TestMain(m *testing.M) { os.Exit(proctest.Run(m)) }

const token = "ledger-test-token"

var client = &http.Client{Timeout: 10 * time.Second}

// node is one running ledger binary.
type node struct {
	p    *proctest.Process
	base string
}

// startLedger runs the ledger binary built with tags on url with env added.
func startLedger(t *testing.T, url string, env map[string]string, tags ...string) node {
	t.Helper()
	all := map[string]string{"DATABASE_URL": url, "HTTP_ADDR": "127.0.0.1:0", "EVENTS_TOKEN": token}
	for k, v := range env {
		all[k] = v
	}
	p := proctest.Start(t, proctest.Build(t, "./example/ledger/cmd/ledger", tags...), all)
	return node{p: p, base: "http://" + p.ListenAddr(t)}
}

// deliver POSTs an event of typ to the ledger as labeling's relay does and
// returns the status.
func (n node) deliver(t *testing.T, id uuid.UUID, typ string) int {
	t.Helper()
	body := fmt.Sprintf(`{"id":%q,"type":%q,"occurredAt":%d,"payload":{"orgId":%q,"ruleId":%q}}`,
		id, typ, time.Now().UnixMilli(), uuid.New(), uuid.New())
	req, err := http.NewRequest(http.MethodPost, n.base+"/internal/v1/events", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := client.Do(req)
	if err != nil {
		return 0 // the process died before answering
	}
	defer res.Body.Close()
	return res.StatusCode
}

// count reads GET /v1/entries/count.
func (n node) count(t *testing.T) int64 {
	t.Helper()
	res, err := client.Get(n.base + "/v1/entries/count")
	require.NoError(t, err)
	defer res.Body.Close()
	require.Equal(t, http.StatusOK, res.StatusCode)
	var body struct{ Count int64 }
	require.NoError(t, json.NewDecoder(res.Body).Decode(&body))
	return body.Count
}

func TestLedgerServes(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("a RuleActivated applies once however often it is delivered, and is listed; another type is 501 and writes nothing", func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, d, ledger.Migrations)
			n := startLedger(t, db.URL, nil)
			id := uuid.Must(uuid.NewV7())
			for range 3 {
				require.Equal(t, http.StatusNoContent, n.deliver(t, id, ledger.EventType))
			}
			require.Equal(t, http.StatusNotImplemented, n.deliver(t, uuid.Must(uuid.NewV7()), "RuleDeactivated"))
			require.EqualValues(t, 1, n.count(t))

			res, err := client.Get(n.base + "/v1/entries?limit=10")
			require.NoError(t, err)
			defer res.Body.Close()
			var list struct{ Entries []ledger.Row }
			require.NoError(t, json.NewDecoder(res.Body).Decode(&list))
			require.Len(t, list.Entries, 1)
			require.Equal(t, id, list.Entries[0].EventID)

			for _, path := range []string{"/healthz", "/readyz"} {
				res, err := client.Get(n.base + path)
				require.NoError(t, err)
				res.Body.Close()
				require.Equal(t, http.StatusOK, res.StatusCode, path)
			}
			require.NotContains(t, n.p.Stdout.String(), "AUTH_DISABLED", "the ledger has no authentication to disable")
		})
	})

	t.Run("without EVENTS_TOKEN serve refuses to start, naming it", func(t *testing.T) {
		t.Parallel()
		var stdout, stderr bytes.Buffer
		lookup := func(name string) (string, bool) {
			if name == "DATABASE_URL" {
				return "sqlite:" + t.TempDir() + "/l.db", true
			}
			return "", false
		}
		require.Equal(t, 1, run([]string{"serve"}, lookup, &stdout, &stderr))
		require.Contains(t, stderr.String(), "EVENTS_TOKEN: required")
	})
}

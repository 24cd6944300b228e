package main

import (
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
	"github.com/acme/outboxpair/migrations"
)

// Both services on one database (contract section 2: a version table each):
// whichever starts first, the second migrates its own set and both serve.
func TestBothServicesShareOneDatabase(t *testing.T) {
	t.Parallel()
	for _, order := range [][]string{{"labeling", "billing"}, {"billing", "labeling"}} {
		t.Run(order[0]+" first, then "+order[1]+": both migrate, serve and deliver", func(t *testing.T) {
			t.Parallel()
			db := pgtest.Empty(t)
			bins := map[string]string{"labeling": binary(t), "billing": proctest.Build(t, "./cmd/billing")}

			// Labeling needs BILLING_URL before billing may have started: a proxy
			// that forwards once billing's address is known (503 until then, which
			// the relay retries).
			var billingURL atomic.Pointer[url.URL]
			proxy := httptest.NewServer(&httputil.ReverseProxy{
				Rewrite: func(r *httputil.ProxyRequest) {
					if u := billingURL.Load(); u != nil {
						r.SetURL(u)
					}
				},
				ErrorHandler: func(w http.ResponseWriter, _ *http.Request, _ error) { w.WriteHeader(http.StatusServiceUnavailable) },
			})
			t.Cleanup(proxy.Close)
			billingURL.Store(&url.URL{Scheme: "http", Host: "127.0.0.1:1"})

			envs := map[string]map[string]string{
				"labeling": baseEnv(db.URL),
				"billing": {
					"DATABASE_URL": db.URL, "EVENTS_TOKEN": "test-token",
					"HTTP_ADDR": "127.0.0.1:0", "AUTH_DISABLED": "true",
				},
			}
			envs["labeling"]["BILLING_URL"] = proxy.URL
			envs["labeling"]["OUTBOX_RETRY_BASE"] = "100ms"
			envs["labeling"]["OUTBOX_RETRY_MAX"] = "500ms"

			client := &http.Client{Timeout: 10 * time.Second}
			bases := map[string]string{}
			procs := map[string]*proctest.Process{}
			for _, svc := range order {
				p := proctest.Start(t, bins[svc], envs[svc], "serve")
				procs[svc] = p
				bases[svc] = "http://" + p.ListenAddr(t)
				require.Eventually(t, func() bool {
					resp, err := client.Get(bases[svc] + "/readyz")
					if err != nil {
						return false
					}
					resp.Body.Close()
					return resp.StatusCode == http.StatusOK
				}, 30*time.Second, 20*time.Millisecond, "%s ready", svc)
			}
			u, err := url.Parse(bases["billing"])
			require.NoError(t, err)
			billingURL.Store(u)

			do := func(method, path, body string) (int, string) {
				req, err := http.NewRequest(method, path, strings.NewReader(body))
				require.NoError(t, err)
				if body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				resp, err := client.Do(req)
				require.NoError(t, err)
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				require.NoError(t, err)
				return resp.StatusCode, string(b)
			}
			quota := func(org string) int64 {
				code, body := do(http.MethodGet, bases["billing"]+"/v1/orgs/"+org+"/quota", "")
				require.Equal(t, http.StatusOK, code, body)
				var q struct {
					ActiveRules int64 `json:"activeRules"`
				}
				require.NoError(t, json.Unmarshal([]byte(body), &q))
				return q.ActiveRules
			}

			org := uuid.NewString()
			require.Zero(t, quota(org))
			rules := "/v1/orgs/" + org + "/rules"
			ids := []string{uuid.NewString(), uuid.NewString()}
			for _, id := range ids {
				code, body := do(http.MethodPost, bases["labeling"]+rules, fmt.Sprintf(`{"id":%q,"name":"n","pattern":"p","label":"l"}`, id))
				require.Equal(t, http.StatusCreated, code, body)
				code, body = do(http.MethodGet, bases["labeling"]+rules+"/"+id, "")
				require.Equal(t, http.StatusOK, code, body)
				code, body = do(http.MethodPost, bases["labeling"]+rules+"/"+id+"/activate", "")
				require.Equal(t, http.StatusOK, code, body)
			}
			code, body := do(http.MethodGet, bases["labeling"]+rules+"?limit=10", "")
			require.Equal(t, http.StatusOK, code, body)
			require.Contains(t, body, ids[0])
			require.Contains(t, body, ids[1])
			require.Eventually(t, func() bool { return quota(org) == 2 }, 30*time.Second, 50*time.Millisecond,
				"both activations reach billing's quota")
			code, body = do(http.MethodPost, bases["labeling"]+rules+"/"+ids[0]+"/deactivate", "")
			require.Equal(t, http.StatusOK, code, body)
			require.Eventually(t, func() bool { return quota(org) == 1 }, 30*time.Second, 50*time.Millisecond,
				"the deactivation reaches billing's quota")

			for _, svc := range order {
				procs[svc].Signal(t, syscall.SIGTERM)
				require.Equal(t, 0, procs[svc].Wait(t, 60*time.Second).ExitCode(), procs[svc].Stderr.String())
			}
		})
	}
}

// TestReplicasStartTogetherOnOneSQLiteFile: three serve processes started at
// once on one new SQLite file all migrate (one after another, under the file
// lock) and become ready, and each migration is recorded once.
func TestReplicasStartTogetherOnOneSQLiteFile(t *testing.T) {
	t.Parallel()
	url := "sqlite:" + filepath.Join(t.TempDir(), "shared", "labeling.db")
	bin := binary(t, "")
	var procs []*proctest.Process
	for range 3 {
		procs = append(procs, proctest.Start(t, bin, baseEnv(url), "serve"))
	}
	for _, p := range procs {
		base := "http://" + p.ListenAddr(t)
		require.Eventually(t, func() bool {
			resp, err := http.Get(base + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 30*time.Second, 20*time.Millisecond, "every replica migrated and serves")
	}
	for _, p := range procs {
		p.Signal(t, syscall.SIGTERM)
		require.Equal(t, 0, p.Wait(t, 30*time.Second).ExitCode(), p.Stderr.String())
	}
	db := dbtest.OpenSQLite(t, url)
	files, err := fs.Glob(migrations.Labeling.SQLite, "*.sql")
	require.NoError(t, err)
	require.Equal(t, len(files), db.Count(t, `SELECT count(*) FROM labeling_goose_db_version WHERE version_id > 0`),
		"each migration applied and recorded once")
}

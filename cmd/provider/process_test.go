package main

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/standin"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

func TestMain(m *testing.M) { os.Exit(proctest.Run(m)) }

func newSecret(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// stand is one run of the stand-in.
type stand struct {
	p    *proctest.Process
	base string
}

func start(t *testing.T, env map[string]string) stand {
	t.Helper()
	p := proctest.Start(t, proctest.Build(t, "./cmd/provider"), env)
	return stand{p: p, base: "http://" + p.ListenAddr(t)}
}

var client = &http.Client{Timeout: 10 * time.Second}

// quotaCall is one call as billing's outbox makes it.
type quotaCall struct {
	id      uuid.UUID
	org     uuid.UUID
	count   int64
	occurs  int64
	version int64
}

func (c quotaCall) body() []byte {
	return fmt.Appendf(nil, `{"id":%q,"type":"QuotaChanged","occurredAt":%d,"payload":{"orgId":%q,"activeRules":%d,"sourceEventId":%q,"version":%d}}`,
		c.id, c.occurs, c.org, c.count, uuid.New(), c.version)
}

// send POSTs c signed with secret by the Standard Webhooks library, as
// infra/webhook does, and returns the status.
func (s stand) send(t *testing.T, secret string, c quotaCall) int {
	t.Helper()
	status, err := s.trySend(secret, c)
	require.NoError(t, err)
	return status
}

// trySend is send for a goroutine of the test's: an error instead of a
// failure.
func (s stand) trySend(secret string, c quotaCall) (int, error) {
	body := c.body()
	wh, err := standardwebhooks.NewWebhook(secret)
	if err != nil {
		return 0, err
	}
	now := time.Now()
	sig, err := wh.Sign(c.id.String(), now, body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequest(http.MethodPost, s.base+standin.Path, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", c.id.String())
	req.Header.Set("webhook-id", c.id.String())
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (s stand) applied(t *testing.T) standin.Applied {
	t.Helper()
	resp, err := client.Get(s.base + "/applied")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var a standin.Applied
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&a))
	return a
}

func envOf(secret, db string) map[string]string {
	return map[string]string{"PROVIDER_ADDR": "127.0.0.1:0", "PROVIDER_SECRET": secret, "PROVIDER_DB": db}
}

// TestStandIn: the stand-in applies each key once, answers a duplicate 200
// without applying it again, refuses a bad signature with 401, keeps the
// count of an org's highest version whatever the order of arrival or the
// calls' occurredAt, and remembers every key it
// applied across a SIGKILL: the key and its effect commit together.
func TestStandIn(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	env := envOf(secret+" "+newSecret(t), filepath.Join(t.TempDir(), "provider.db")) // a rotation: the first verifies
	s := start(t, env)

	org := uuid.New()
	// The older change stamped later: two replicas that committed in the other order.
	older := quotaCall{id: uuid.Must(uuid.NewV7()), org: org, count: 1, occurs: 2000, version: 1}
	newer := quotaCall{id: uuid.Must(uuid.NewV7()), org: org, count: 2, occurs: 1000, version: 2}
	other := quotaCall{id: uuid.Must(uuid.NewV7()), org: uuid.New(), count: 7, occurs: 1500, version: 1}
	require.Equal(t, http.StatusOK, s.send(t, secret, newer))
	require.Equal(t, http.StatusOK, s.send(t, secret, older), "arrives last, is older")
	require.Equal(t, http.StatusOK, s.send(t, secret, other))
	require.Equal(t, http.StatusOK, s.send(t, secret, older), "a duplicate is answered 200")
	require.Equal(t, http.StatusUnauthorized, s.send(t, newSecret(t), quotaCall{id: uuid.New(), org: org, count: 9, occurs: 3000, version: 9}))
	require.Equal(t, standin.Applied{Applied: 3, Duplicates: 1, Rejected: 1,
		ByOrg:    map[string]int64{org.String(): 2, other.org.String(): 7},
		Versions: map[string]int64{org.String(): 2, other.org.String(): 1}}, s.applied(t))

	s.p.Kill(t)
	s = start(t, env)
	require.Equal(t, http.StatusOK, s.send(t, secret, other), "after a crash, a key applied before is a duplicate")
	third := quotaCall{id: uuid.Must(uuid.NewV7()), org: org, count: 3, occurs: 3000, version: 3}
	require.Equal(t, http.StatusOK, s.send(t, secret, third))
	require.Equal(t, standin.Applied{Applied: 4, Duplicates: 2,
		ByOrg:    map[string]int64{org.String(): 3, other.org.String(): 7},
		Versions: map[string]int64{org.String(): 3, other.org.String(): 1}}, s.applied(t))

	resp, err := client.Get(s.base + "/healthz")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	addr := strings.TrimPrefix(s.base, "http://")
	h := proctest.Start(t, proctest.Build(t, "./cmd/provider"), map[string]string{"PROVIDER_ADDR": addr}, "healthcheck")
	require.Equal(t, 0, h.Wait(t, time.Minute).ExitCode(), "healthcheck")

	s.p.Signal(t, syscall.SIGTERM)
	require.Equal(t, 0, s.p.Wait(t, time.Minute).ExitCode(), "exits 0 on SIGTERM")
}

// TestFailEvery: PROVIDER_FAIL_EVERY=2 answers every second call 503 after
// applying it, as if the answer were lost; the retry is absorbed.
func TestFailEvery(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	env := envOf(secret, filepath.Join(t.TempDir(), "provider.db"))
	env["PROVIDER_FAIL_EVERY"] = "2"
	s := start(t, env)
	a := quotaCall{id: uuid.Must(uuid.NewV7()), org: uuid.New(), count: 1, occurs: 1000, version: 1}
	b := quotaCall{id: uuid.Must(uuid.NewV7()), org: uuid.New(), count: 1, occurs: 1000, version: 1}
	require.Equal(t, http.StatusOK, s.send(t, secret, a))
	require.Equal(t, http.StatusServiceUnavailable, s.send(t, secret, b), "the second call: applied, then 503")
	require.Equal(t, http.StatusOK, s.send(t, secret, b), "its retry is a duplicate")
	got := s.applied(t)
	require.EqualValues(t, 2, got.Applied)
	require.EqualValues(t, 1, got.Duplicates)
	require.EqualValues(t, 1, got.Injected)
}

// TestBadSettings: each bad setting stops the stand-in at start with exit 1
// and one line naming its variable (never the secret), creating nothing.
func TestBadSettings(t *testing.T) {
	t.Parallel()
	bin := proctest.Build(t, "./cmd/provider")
	dir := t.TempDir()
	good := newSecret(t)
	for name, c := range map[string]struct {
		env  map[string]string
		want string
	}{
		"no secret":      {map[string]string{}, "provider: PROVIDER_SECRET: required but not set"},
		"not a secret":   {map[string]string{"PROVIDER_SECRET": "hunter2"}, `provider: PROVIDER_SECRET: secret 1 of 1: does not start with "whsec_"`},
		"bad address":    {map[string]string{"PROVIDER_SECRET": good, "PROVIDER_ADDR": "nowhere"}, "provider: PROVIDER_ADDR: "},
		"bad fail every": {map[string]string{"PROVIDER_SECRET": good, "PROVIDER_FAIL_EVERY": "often"}, "provider: PROVIDER_FAIL_EVERY: "},
		"bad db":         {map[string]string{"PROVIDER_SECRET": good, "PROVIDER_DB": ":memory:"}, "provider: PROVIDER_DB: "},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"PROVIDER_ADDR": "127.0.0.1:0", "PROVIDER_DB": filepath.Join(dir, name+".db")}
			for k, v := range c.env {
				env[k] = v
			}
			p := proctest.Start(t, bin, env)
			require.Equal(t, 1, p.Wait(t, time.Minute).ExitCode())
			stderr := p.Stderr.String()
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			require.True(t, strings.HasPrefix(stderr, c.want), "%q", stderr)
			require.NotContains(t, stderr, "hunter2")
			_, err := os.Stat(filepath.Join(dir, name+".db"))
			require.True(t, os.IsNotExist(err), "nothing created")
		})
	}

	p := proctest.Start(t, bin, map[string]string{}, "frobnicate")
	require.Equal(t, 2, p.Wait(t, time.Minute).ExitCode(), "a usage error")
}

// TestKillKeepsEveryAnsweredCall: the group commit answers 2xx only after the
// commit. 16 senders call the stand-in at once, without pause, and it is
// killed (SIGKILL) in the middle of their calls, once 300 have been answered;
// every key it answered 200 is then in its file, and the senders' calls left
// unanswered are the only ones that may be missing. The sender that receives
// the 300th 200 kills it at once, while the other senders' calls are in the
// group being committed, or waiting for the next: an answer given before its
// commit would be lost here.
func TestKillKeepsEveryAnsweredCall(t *testing.T) {
	t.Parallel()
	secret := newSecret(t)
	file := filepath.Join(t.TempDir(), "provider.db")
	s := start(t, envOf(secret, file))

	var (
		mu       sync.Mutex
		answered []string
		sent     atomic.Int64
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				c := quotaCall{id: uuid.Must(uuid.NewV7()), org: uuid.New(), count: 1, occurs: 1000, version: 1}
				sent.Add(1)
				status, err := s.trySend(secret, c)
				if err != nil {
					return // killed: refused, or reset in the middle of the call
				}
				if status == http.StatusOK {
					mu.Lock()
					answered = append(answered, c.id.String())
					if len(answered) == 300 {
						_ = syscall.Kill(s.p.Pid(), syscall.SIGKILL)
					}
					mu.Unlock()
				}
			}
		})
	}
	select {
	case <-s.p.Done():
	case <-time.After(time.Minute):
		t.Fatal("the stand-in had not answered 300 calls after a minute")
	}
	close(stop)
	wg.Wait()

	db, err := sqlite.Open(t.Context(), "sqlite:"+file, sqldb.Bounds{StatementTimeout: 5 * time.Second, LockTimeout: 5 * time.Second})
	require.NoError(t, err)
	defer db.Close()
	kept := map[string]bool{}
	err = db.InTx(t.Context(), sqldb.TxOptions{ReadOnly: true}, func(tx sqlite.Tx) error {
		rows, err := tx.Query(t.Context(), `SELECT idempotency_key FROM provider_applied`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if err := rows.Scan(&k); err != nil {
				return err
			}
			kept[k] = true
		}
		return rows.Err()
	})
	require.NoError(t, err)
	for _, k := range answered {
		require.True(t, kept[k], "key %s was answered 200 but is not in the file after the kill", k)
	}
	t.Logf("%d calls sent, %d answered 200 before the kill, %d keys in the file", sent.Load(), len(answered), len(kept))
	require.GreaterOrEqual(t, len(kept), len(answered))
}

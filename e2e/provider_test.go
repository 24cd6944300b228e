package e2e

// The stand-in provider (cmd/provider) for the second hop's scenarios
// (issue 28): billing's outbox calls it through infra/webhook. The scenarios
// that run billing with PROVIDER_URL are in secondhop_test.go (config.provider);
// the helpers here start, stop and read the stand-in, and
// TestStandInBehindTheCall checks them and the two pieces together.

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/webhook"
	"github.com/acme/outboxpair/internal/standin"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// standIn is one stand-in provider, restartable on the same address with the
// same database, so that it can be down and up again within a scenario.
type standIn struct {
	t      *testing.T
	bin    string
	addr   string
	secret string // PROVIDER_SECRET: what billing signs with (PROVIDER_SECRET too)
	env    map[string]string
	life   *proctest.Process // nil while down
}

// newSecret is a fresh Standard Webhooks secret.
func newSecret(t *testing.T) string {
	t.Helper()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	return "whsec_" + base64.StdEncoding.EncodeToString(key)
}

// startStandIn starts a stand-in on a free loopback port with a fresh
// database; failEvery > 0 answers 503 to every failEvery-th call after
// applying it (PROVIDER_FAIL_EVERY).
func startStandIn(t *testing.T, failEvery int) *standIn {
	t.Helper()
	s := &standIn{t: t, bin: proctest.Build(t, "./cmd/provider"), addr: freeAddr(t), secret: newSecret(t)}
	s.env = map[string]string{
		"PROVIDER_ADDR":       s.addr,
		"PROVIDER_SECRET":     s.secret,
		"PROVIDER_DB":         filepath.Join(t.TempDir(), "provider.db"),
		"PROVIDER_FAIL_EVERY": fmt.Sprint(failEvery),
	}
	s.up()
	return s
}

// url is PROVIDER_URL for billing.
func (s *standIn) url() string { return "http://" + s.addr + standin.Path }

// up starts the stand-in (again) and waits for its /healthz.
func (s *standIn) up() {
	s.t.Helper()
	require.Nil(s.t, s.life, "the stand-in is already up")
	s.life = proctest.Start(s.t, s.bin, s.env)
	s.t.Logf("e2e: stand-in provider on %s (pid %d)", s.addr, s.life.Pid())
	client := &http.Client{Timeout: 2 * time.Second}
	waitFor(s.t, readyTimeout, func() bool {
		select {
		case <-s.life.Done():
			require.Fail(s.t, "the stand-in exited before answering", "%s", s.life.Stderr.Tail(5))
		default:
		}
		resp, err := client.Get("http://" + s.addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, "the stand-in answers /healthz")
}

// down kills the stand-in (SIGKILL): a provider that crashed or is
// unreachable. What it committed stays in its database.
func (s *standIn) down() {
	s.t.Helper()
	require.NotNil(s.t, s.life, "the stand-in is already down")
	s.life.Kill(s.t)
	s.life = nil
	tally.add(func(c *counts) { c.kills++; c.providerOutages++ })
}

// applied reads GET /applied.
func (s *standIn) applied() standin.Applied {
	s.t.Helper()
	a, err := s.fetchApplied()
	require.NoError(s.t, err)
	return a
}

// fetchApplied reads GET /applied, an error when the stand-in does not answer
// it (down, or its database unavailable).
func (s *standIn) fetchApplied() (standin.Applied, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + s.addr + "/applied")
	if err != nil {
		return standin.Applied{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return standin.Applied{}, fmt.Errorf("GET /applied answered %d", resp.StatusCode)
	}
	var a standin.Applied
	err = json.NewDecoder(resp.Body).Decode(&a)
	return a, err
}

// TestStandInBehindTheCall: infra/webhook's call and the stand-in agree (the
// signature, the key, the envelope), and the stand-in absorbs what billing's
// relay will do to it: a call repeated after its answer was lost, a call
// while it is down (a failed attempt, retried), a retry after a crash finds
// the key applied before the crash.
func TestStandInBehindTheCall(t *testing.T) {
	t.Parallel()
	s := startStandIn(t, 2)
	client, err := webhook.New(webhook.Config{URL: s.url(), Secrets: []string{s.secret, newSecret(t)}}, nil)
	require.NoError(t, err)
	org := uuid.New()
	call := func(n int64) outbox.Message {
		return outbox.Message{ID: uuid.Must(uuid.NewV7()), Tag: "QuotaChanged", CreatedAt: time.Now().UnixMilli(), Attempt: 1,
			Payload: json.RawMessage(fmt.Sprintf(`{"orgId":%q,"activeRules":%d,"sourceEventId":%q,"version":%d}`, org, n, uuid.New(), n))}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	first, second := call(1), call(2)
	require.NoError(t, client.Call(ctx, first))
	err = client.Call(ctx, second)
	require.ErrorContains(t, err, "503", "PROVIDER_FAIL_EVERY=2: applied, then 503")
	require.False(t, outbox.IsPermanent(err), "the relay retries it")
	second.Attempt = 2
	require.NoError(t, client.Call(ctx, second), "the retry is absorbed")

	s.down()
	third := call(3)
	err = client.Call(ctx, third)
	require.Error(t, err, "the provider is down")
	require.False(t, outbox.IsPermanent(err))
	s.env["PROVIDER_FAIL_EVERY"] = "0" // back up without injected failures
	s.up()
	third.Attempt = 2
	require.NoError(t, client.Call(ctx, third))
	require.NoError(t, client.Call(ctx, first), "a key applied before the crash is a duplicate after it")

	require.Equal(t, standin.Applied{Applied: 3, Duplicates: 2, ByOrg: map[string]int64{org.String(): 3},
		Versions: map[string]int64{org.String(): 3}}, s.applied(),
		"each change applied once, however often it was called")
}

package standin_test

import (
	"bytes"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/standin"
)

// group is a stand-in in this process for the group commit's tests: its
// server, its file, a signer, and a read connection of its own on the file,
// which sees only what was committed (WAL: a reader never sees a transaction
// before its COMMIT, and under synchronous=FULL the COMMIT has fsync'ed it).
type group struct {
	srv    *standin.Server
	h      http.Handler
	wh     *standardwebhooks.Webhook
	reader *sql.DB
}

func openGroup(t *testing.T) *group {
	t.Helper()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	file := filepath.Join(t.TempDir(), "p.db")
	srv, err := standin.Open(t.Context(), standin.Config{Secret: secret, DB: file}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	reader, err := sql.Open("sqlite", sqlite.DSN(file, time.Second, false, true))
	require.NoError(t, err)
	t.Cleanup(func() { reader.Close() })
	return &group{srv: srv, h: srv.Handler(), wh: wh, reader: reader}
}

// answer is what the stand-in answered one call, and whether its key was
// committed when the answer began.
type answer struct {
	status    int
	committed bool
	err       error // of the look-up
}

// watch is the ResponseWriter of one call: when the handler starts its
// answer (WriteHeader, or a first Write, which is a 200), it looks the key
// up through the reader, so a 2xx given before the commit is seen.
type watch struct {
	http.ResponseWriter
	g       *group
	key     string
	got     answer
	started bool
}

func (w *watch) WriteHeader(code int) {
	w.observe(code)
	w.ResponseWriter.WriteHeader(code)
}

func (w *watch) Write(b []byte) (int, error) {
	w.observe(http.StatusOK)
	return w.ResponseWriter.Write(b)
}

func (w *watch) observe(code int) {
	if w.started {
		return
	}
	w.started = true
	w.got.status = code
	if code >= 200 && code < 300 {
		var n int
		w.got.err = w.g.reader.QueryRow(`SELECT count(*) FROM provider_applied WHERE idempotency_key = ?1`, w.key).Scan(&n)
		w.got.committed = n == 1
	}
}

// send signs body under key as billing does, serves it, and returns the
// answer as the watch saw it. Safe for concurrent use.
func (g *group) send(key, body string) answer {
	now := time.Now()
	sig, err := g.wh.Sign(key, now, []byte(body))
	if err != nil {
		return answer{err: err}
	}
	req := httptest.NewRequest(http.MethodPost, standin.Path, bytes.NewReader([]byte(body)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	req.Header.Set("webhook-id", key)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	w := &watch{ResponseWriter: httptest.NewRecorder(), g: g, key: key}
	g.h.ServeHTTP(w, req)
	return w.got
}

// sendAll sends every body under its key at once (each from its own
// goroutine, released together) and returns the answers in order.
func (g *group) sendAll(keys, bodies []string) []answer {
	answers := make([]answer, len(keys))
	release := make(chan struct{})
	var wg sync.WaitGroup
	for i := range keys {
		wg.Go(func() {
			<-release
			answers[i] = g.send(keys[i], bodies[i])
		})
	}
	close(release)
	wg.Wait()
	return answers
}

// TestGroupCommitAnswersOnlyCommittedCalls: 200 calls at once, most of them
// committed in groups, each answered 2xx only when its key can be read by
// another connection, i.e. once its transaction has committed; every one of
// them applied once.
func TestGroupCommitAnswersOnlyCommittedCalls(t *testing.T) {
	t.Parallel()
	g := openGroup(t)
	const n = 200
	keys, bodies := make([]string, n), make([]string, n)
	orgs := map[string]int64{}
	for i := range n {
		org := uuid.New()
		keys[i], bodies[i] = uuid.NewString(), change(org, int64(i), 1, 1000)
		orgs[org.String()] = int64(i)
	}
	for i, a := range g.sendAll(keys, bodies) {
		require.NoError(t, a.err, "call %d", i)
		require.Equal(t, http.StatusOK, a.status, "call %d", i)
		require.True(t, a.committed, "call %d answered 200 before its key was committed", i)
	}
	got := (&stand{t: t, h: g.h}).applied()
	require.EqualValues(t, n, got.Applied)
	require.Zero(t, got.Duplicates)
	require.Equal(t, orgs, got.ByOrg)
}

// TestGroupCommitAppliesConcurrentDuplicatesOnce: one call sent 24 times at
// once (a sender's retries racing its first attempt) is applied once: every
// copy answered 200 after the commit, one key recorded, 23 duplicates
// counted, the org's count set once; the copies that land in one group are
// told apart inside its transaction.
func TestGroupCommitAppliesConcurrentDuplicatesOnce(t *testing.T) {
	t.Parallel()
	g := openGroup(t)
	const copies = 24
	org := uuid.New()
	key, body := uuid.NewString(), change(org, 5, 1, 1000)
	keys, bodies := make([]string, copies), make([]string, copies)
	for i := range copies {
		keys[i], bodies[i] = key, body
	}
	for i, a := range g.sendAll(keys, bodies) {
		require.NoError(t, a.err, "copy %d", i)
		require.Equal(t, http.StatusOK, a.status, "copy %d", i)
		require.True(t, a.committed, "copy %d answered 200 before its key was committed", i)
	}
	got := (&stand{t: t, h: g.h}).applied()
	require.EqualValues(t, 1, got.Applied)
	require.EqualValues(t, copies-1, got.Duplicates)
	require.Equal(t, map[string]int64{org.String(): 5}, got.ByOrg)
	require.Equal(t, map[string]int64{org.String(): 1}, got.Versions)
}

// TestGroupCommitAfterClose: a call that comes after Close is answered 503
// and applies nothing; Close twice is harmless.
func TestGroupCommitAfterClose(t *testing.T) {
	t.Parallel()
	g := openGroup(t)
	require.Equal(t, http.StatusOK, g.send(uuid.NewString(), change(uuid.New(), 1, 1, 1000)).status)
	require.NoError(t, g.srv.Close())
	require.Equal(t, http.StatusServiceUnavailable, g.send(uuid.NewString(), change(uuid.New(), 1, 1, 1000)).status)
	var n int
	require.NoError(t, g.reader.QueryRow(`SELECT count(*) FROM provider_applied`).Scan(&n))
	require.Equal(t, 1, n, "the call after Close applied nothing")
}

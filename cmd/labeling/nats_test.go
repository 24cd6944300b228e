package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/natstest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
	"github.com/acme/outboxpair/migrations"
)

func TestServeNATS(t *testing.T) {
	t.Parallel()

	t.Run("with NATS unreachable, serves its API and is ready; the row waits in the outbox", func(t *testing.T) {
		t.Parallel()
		l, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		dead := l.Addr().String()
		require.NoError(t, l.Close()) // nothing listens there now
		db := pgtest.New(t, migrations.Labeling)
		env := baseEnv(db.URL)
		env["EVENTS_TRANSPORT"] = "nats"
		env["NATS_URL"] = "nats://" + dead
		env["OUTBOX_POLL_INTERVAL"] = "50ms"
		env["OUTBOX_RETRY_BASE"] = "50ms"
		env["OUTBOX_RETRY_MAX"] = "100ms"
		env["OUTBOX_HANDLER_TIMEOUT"] = "1s"
		env["OUTBOX_LEASE"] = "10s"
		env["OUTBOX_MAX_ATTEMPTS"] = "1"
		p := proctest.Start(t, binary(t), env, "serve")
		base := "http://" + p.ListenAddr(t)
		client := &http.Client{Timeout: 5 * time.Second}
		status := func(method, path string, body string) int {
			req, err := http.NewRequest(method, base+path, strings.NewReader(body))
			require.NoError(t, err)
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			resp, err := client.Do(req)
			require.NoError(t, err)
			resp.Body.Close()
			return resp.StatusCode
		}
		require.Eventually(t, func() bool { return status(http.MethodGet, "/readyz", "") == http.StatusOK },
			30*time.Second, 20*time.Millisecond, "readiness reflects the database only")
		org, id := "6f1c1b1e-0000-4000-8000-000000000001", "6f1c1b1e-0000-4000-8000-000000000002"
		require.Equal(t, http.StatusCreated, status(http.MethodPost, "/v1/orgs/"+org+"/rules",
			`{"id":"`+id+`","name":"n","pattern":"p","label":"l"}`))
		require.Equal(t, http.StatusOK, status(http.MethodPost, "/v1/orgs/"+org+"/rules/"+id+"/activate", ""))
		// The row waits without spending attempts (one attempt allowed, and
		// none used up), tried again and again.
		tries := map[int64]bool{}
		require.Eventually(t, func() bool {
			var attempts int
			var available int64
			var processed, failed *int64
			var lastError *string
			require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT attempts, available_at, processed_at, failed_at, last_error FROM outbox_events`).
				Scan(&attempts, &available, &processed, &failed, &lastError))
			require.Nil(t, processed, "nothing can be published")
			require.Nil(t, failed, "waiting for NATS is no failed attempt")
			require.LessOrEqual(t, attempts, 1, "only a claim in flight holds an attempt")
			if lastError != nil {
				tries[available] = true
			}
			return len(tries) >= 3
		}, 30*time.Second, 50*time.Millisecond, "the row waits for NATS and is tried again")

		p.Signal(t, syscall.SIGTERM)
		require.Equal(t, 0, p.Wait(t, 30*time.Second).ExitCode(), p.Stderr.String())
	})

	t.Run("nats without NATS_URL stops start-up with a line naming it", func(t *testing.T) {
		t.Parallel()
		env := baseEnv("postgres://postgres@127.0.0.1:1/none")
		env["EVENTS_TRANSPORT"] = "nats"
		p := proctest.Start(t, binary(t), env)
		require.Equal(t, exitFail, p.Wait(t, 30*time.Second).ExitCode())
		stderr := p.Stderr.String()
		require.True(t, strings.HasPrefix(stderr, "labeling: NATS_URL: "), stderr)
		require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	})
}

// natsServer runs a real JetStream server in the test process.
func natsServer(t *testing.T) *server.Server {
	t.Helper()
	return natstest.Start(t)
}

func TestNATSRetention(t *testing.T) {
	t.Parallel()

	t.Run("billing away longer than the processed retention loses nothing: every event waits in the stream", func(t *testing.T) {
		t.Parallel()
		const retention = 2 * time.Second // OUTBOX_PROCESSED_RETENTION, shortened
		ns := natsServer(t)
		db := pgtest.New(t, migrations.Labeling)
		env := baseEnv(db.URL)
		env["EVENTS_TRANSPORT"] = "nats"
		env["NATS_URL"] = ns.ClientURL()
		env["OUTBOX_POLL_INTERVAL"] = "50ms"
		env["OUTBOX_RETRY_BASE"] = "50ms"
		env["OUTBOX_RETRY_MAX"] = "100ms"
		env["OUTBOX_PROCESSED_RETENTION"] = retention.String()
		env["NATS_DUPLICATE_WINDOW"] = "1s"
		env["CLEANUP_INTERVAL"] = "100ms"
		p := proctest.Start(t, binary(t), env, "serve")
		base := "http://" + p.ListenAddr(t)
		post := poster(t, base)

		// Billing is away: its durable exists (labeling made it), nothing reads it.
		const n = 10
		org := uuid.NewString()
		for i := range n {
			id := uuid.NewString()
			require.Equal(t, http.StatusCreated, post("/v1/orgs/"+org+"/rules", fmt.Sprintf(`{"id":%q,"name":"r%d","pattern":"p","label":"l"}`, id, i)))
			require.Equal(t, http.StatusOK, post("/v1/orgs/"+org+"/rules/"+id+"/activate", ""))
		}
		require.Eventually(t, func() bool {
			var left int
			require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_events`).Scan(&left))
			return left == 0
		}, 30*time.Second, 50*time.Millisecond, "every row published, then deleted at the processed retention")
		// The absence itself: past the retention once more, by the clock, with
		// no row left in the outbox to publish again.
		away := time.NewTimer(retention)
		<-away.C

		var mu sync.Mutex
		got := map[string]bool{}
		c, err := stream.NewConsumer(stream.ConsumerConfig{URL: ns.ClientURL(), Durable: "billing"},
			func(_ context.Context, m stream.Message) error {
				require.NoError(t, stream.Verify([]byte(env["EVENTS_TOKEN"]), m.Subject, m.MsgID, m.Data, m.Signature), "signed")
				mu.Lock()
				got[m.MsgID] = true
				mu.Unlock()
				return nil
			}, slog.New(slog.NewTextHandler(io.Discard, nil)))
		require.NoError(t, err)
		require.NoError(t, c.Start(context.Background()))
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
		require.Eventually(t, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return len(got) == n
		}, 30*time.Second, 20*time.Millisecond, "billing, back, gets every event published while it was away")

		p.Signal(t, syscall.SIGTERM)
		require.Equal(t, 0, p.Wait(t, 30*time.Second).ExitCode(), p.Stderr.String())
	})
}

// tlsNATSServer runs a JetStream server that speaks TLS only, with a
// certificate for 127.0.0.1 from a CA of its own, whose PEM file it returns.
func tlsNATSServer(t *testing.T) (*server.Server, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	ca := filepath.Join(t.TempDir(), "ca.pem")
	require.NoError(t, os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true, TLS: true, TLSTimeout: 2,
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats server ready")
	t.Cleanup(s.Shutdown)
	return s, ca
}

func TestNATSTLS(t *testing.T) {
	t.Parallel()

	for name, trusted := range map[string]bool{
		"with tls:// and the server's CA trusted, labeling publishes over TLS":             true,
		"with tls:// and a server certificate nobody vouches for, labeling never connects": false,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s, ca := tlsNATSServer(t)
			tlsURL := "tls://" + s.Addr().String()
			db := pgtest.New(t, migrations.Labeling)
			env := baseEnv(db.URL)
			env["EVENTS_TRANSPORT"] = "nats"
			env["NATS_URL"] = tlsURL
			if trusted {
				env["SSL_CERT_FILE"] = ca // Go's roots on Linux: the server's CA only
			} else {
				env["SSL_CERT_FILE"] = filepath.Join(t.TempDir(), "none.pem")
			}
			p := proctest.Start(t, binary(t), env, "serve")
			p.ListenAddr(t)

			pool := x509.NewCertPool()
			pem, err := os.ReadFile(ca)
			require.NoError(t, err)
			require.True(t, pool.AppendCertsFromPEM(pem))
			nc, err := nats.Connect(tlsURL, nats.Secure(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}))
			require.NoError(t, err)
			t.Cleanup(nc.Close)
			js, err := jetstream.New(nc)
			require.NoError(t, err)
			if trusted {
				require.Eventually(t, func() bool {
					_, err := js.Stream(context.Background(), stream.Name)
					return err == nil
				}, 30*time.Second, 50*time.Millisecond, "labeling made its stream over TLS")
			} else {
				require.Eventually(t, func() bool {
					return strings.Contains(p.Output.String(), "x509: certificate signed by unknown authority")
				}, 30*time.Second, 50*time.Millisecond, "labeling says why it cannot connect")
				_, err := js.Stream(context.Background(), stream.Name)
				require.ErrorIs(t, err, jetstream.ErrStreamNotFound, "nothing reached the server")
			}
			p.Signal(t, syscall.SIGTERM)
			require.Equal(t, 0, p.Wait(t, 30*time.Second).ExitCode(), p.Stderr.String())
		})
	}
}

package stream_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/stream"
)

// operatorServer runs a real JetStream server in operator mode (users are JWTs
// signed by an account the operator signed), and returns it with a credentials
// file for one user of that account, as nsc would write it.
func operatorServer(t *testing.T) (*server.Server, string) {
	t.Helper()
	op, err := nkeys.CreateOperator()
	require.NoError(t, err)
	opPub, err := op.PublicKey()
	require.NoError(t, err)
	opClaims := jwt.NewOperatorClaims(opPub)

	account := func(js bool) (nkeys.KeyPair, string, string) {
		kp, err := nkeys.CreateAccount()
		require.NoError(t, err)
		pub, err := kp.PublicKey()
		require.NoError(t, err)
		ac := jwt.NewAccountClaims(pub)
		if js {
			ac.Limits.JetStreamLimits = jwt.JetStreamLimits{MemoryStorage: -1, DiskStorage: -1, Streams: -1, Consumer: -1}
		}
		token, err := ac.Encode(op)
		require.NoError(t, err)
		return kp, pub, token
	}
	_, sysPub, sysJWT := account(false)
	appKP, appPub, appJWT := account(true)
	resolver := &server.MemAccResolver{}
	require.NoError(t, resolver.Store(sysPub, sysJWT))
	require.NoError(t, resolver.Store(appPub, appJWT))

	user, err := nkeys.CreateUser()
	require.NoError(t, err)
	userPub, err := user.PublicKey()
	require.NoError(t, err)
	uc := jwt.NewUserClaims(userPub)
	uc.IssuerAccount = appPub
	userJWT, err := uc.Encode(appKP)
	require.NoError(t, err)
	seed, err := user.Seed()
	require.NoError(t, err)
	creds, err := jwt.FormatUserConfig(userJWT, seed)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "app.creds")
	require.NoError(t, os.WriteFile(path, creds, 0o600))

	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		TrustedOperators: []*jwt.OperatorClaims{opClaims}, AccountResolver: resolver, SystemAccount: sysPub})
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats server ready")
	t.Cleanup(s.Shutdown)
	return s, path
}

func TestCredentialsFile(t *testing.T) {
	t.Parallel()

	t.Run("with NATS_CREDS, labeling and billing connect to an operator-mode server and work end to end", func(t *testing.T) {
		t.Parallel()
		s, creds := operatorServer(t)
		_, err := nats.Connect(s.ClientURL())
		require.Error(t, err, "the server takes no client without credentials")

		cfg := publisherConfig(s.ClientURL())
		cfg.Creds = creds
		p := startPublisher(t, cfg)
		r := &recorder{}
		c, err := stream.NewConsumer(stream.ConsumerConfig{URL: s.ClientURL(), Creds: creds, Durable: "billing"}, r.handle, logger)
		require.NoError(t, err)
		require.NoError(t, c.Start(context.Background()))
		t.Cleanup(func() { require.NoError(t, c.Stop(context.Background())) })
		m := message("RuleActivated")
		publishUntil(t, p, m)
		eventually(t, func() bool { return len(r.deliveries(m.ID.String())) == 1 }, "delivered")
	})

	bad := map[string]string{
		"a missing file":     "",
		"a file with no JWT": "-----BEGIN USER NKEY SEED-----\nSUAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n------END USER NKEY SEED------\n",
		"a file of garbage":  "not credentials",
	}
	for name, content := range bad {
		t.Run("a bad credentials file stops start-up naming NATS_CREDS: "+name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "bad.creds")
			if content != "" {
				require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
			}
			cfg := publisherConfig("nats://127.0.0.1:1")
			cfg.Creds = path
			p, err := stream.NewPublisher(cfg, logger)
			require.NoError(t, err)
			require.ErrorContains(t, p.Start(context.Background()), "NATS_CREDS")
			c, err := stream.NewConsumer(stream.ConsumerConfig{URL: "nats://127.0.0.1:1", Creds: path, Durable: "billing"},
				(&recorder{}).handle, logger)
			require.NoError(t, err)
			require.ErrorContains(t, c.Start(context.Background()), "NATS_CREDS")
		})
	}
}

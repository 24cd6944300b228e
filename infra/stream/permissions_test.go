package stream_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/stream"
)

// composeConfig is the server configuration docker-compose.nats.yml runs.
const composeConfig = "../../deploy/nats/nats-server.conf"

// Passwords the test gives the configuration, as the compose file does through
// the environment.
const (
	labelingPassword = "labeling-test-password"
	billingPassword  = "billing-test-password"
)

// composeServer runs a real server with composeConfig: its variables defined
// ahead of it (the server reads them from the environment otherwise), its
// store, port and monitoring moved so that tests run side by side.
func composeServer(t *testing.T) *server.Server {
	t.Helper()
	conf, err := os.ReadFile(composeConfig)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "nats-server.conf")
	vars := "LABELING_NATS_PASSWORD: " + strconv.Quote(labelingPassword) + "\n" +
		"BILLING_NATS_PASSWORD: " + strconv.Quote(billingPassword) + "\n"
	require.NoError(t, os.WriteFile(path, append([]byte(vars), conf...), 0o600))
	opts, err := server.ProcessConfigFile(path)
	require.NoError(t, err, "the compose configuration parses")
	require.True(t, opts.JetStream, "JetStream on")
	require.Equal(t, "/data", opts.StoreDir, "the store the compose volume holds")
	opts.Host, opts.Port, opts.HTTPPort, opts.StoreDir = "127.0.0.1", server.RANDOM_PORT, 0, t.TempDir()
	opts.NoSigs, opts.NoLog = true, true
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second), "nats server ready")
	t.Cleanup(s.Shutdown)
	return s
}

// as is the server's URL with user and password in it, as NATS_URL carries them.
func as(t *testing.T, s *server.Server, user, password string) string {
	t.Helper()
	u, err := url.Parse(s.ClientURL())
	require.NoError(t, err)
	u.User = url.UserPassword(user, password)
	return u.String()
}

// connectAs is a raw client of the server as user, with that service's inbox.
func connectAs(t *testing.T, s *server.Server, user, password string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(as(t, s, user, password), nats.CustomInboxPrefix(stream.InboxPrefix(user)))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

func TestComposePermissions(t *testing.T) {
	t.Parallel()
	s := composeServer(t)
	labelingURL, billingURL := as(t, s, "labeling", labelingPassword), as(t, s, "billing", billingPassword)

	// Labeling and billing with their own credentials, end to end; the subtests
	// below then find the stream and billing's durable in place.
	p := publisher(t, labelingURL)
	r := &recorder{}
	// Filtered to billing's types, as cmd/billing makes it: its user may
	// update its durable's filter.
	c := typedConsumer(t, billingURL, "billing", []string{"RuleActivated", "RuleDeactivated"}, r, logger)
	require.Equal(t, []string{"labeling.events.RuleActivated", "labeling.events.RuleDeactivated"}, c.Filter())
	m := message("RuleActivated")
	publishUntil(t, p, m)
	eventually(t, func() bool { return len(r.deliveries(m.ID.String())) == 1 }, "billing got labeling's event")
	_, admin := connectAs(t, s, "labeling", labelingPassword)
	eventually(t, func() bool {
		ci, err := admin.Consumer(context.Background(), stream.Name, "billing")
		require.NoError(t, err)
		return ci.CachedInfo().AckFloor.Stream == 1
	}, "billing acked it")
	msgs := func() uint64 {
		st, err := admin.Stream(context.Background(), stream.Name)
		require.NoError(t, err)
		return st.CachedInfo().State.LastSeq
	}

	t.Run("a client without credentials is refused", func(t *testing.T) {
		t.Parallel()
		_, err := nats.Connect(s.ClientURL())
		require.ErrorIs(t, err, nats.ErrAuthorization)
		_, err = nats.Connect(as(t, s, "labeling", "guessed"))
		require.ErrorIs(t, err, nats.ErrAuthorization)
	})

	t.Run("billing's credentials cannot publish an event", func(t *testing.T) {
		t.Parallel()
		_, js := connectAs(t, s, "billing", billingPassword)
		before := msgs()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.Publish(ctx, stream.Subject("RuleActivated"), []byte(`{}`))
		require.Error(t, err)
		require.Equal(t, before, msgs(), "nothing stored")
	})

	t.Run("billing's credentials cannot delete, purge or change the stream", func(t *testing.T) {
		t.Parallel()
		_, js := connectAs(t, s, "billing", billingPassword)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		require.Error(t, js.DeleteStream(ctx, stream.Name))
		_, err := js.UpdateStream(ctx, jetstream.StreamConfig{Name: stream.Name, Subjects: []string{stream.Subjects},
			Storage: jetstream.FileStorage, Retention: jetstream.LimitsPolicy, MaxAge: time.Second})
		require.Error(t, err)
		_, err = admin.Stream(context.Background(), stream.Name)
		require.NoError(t, err, "the stream is still there")
	})

	t.Run("billing's credentials cannot make a consumer of another name", func(t *testing.T) {
		t.Parallel()
		_, js := connectAs(t, s, "billing", billingPassword)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := js.CreateConsumer(ctx, stream.Name, stream.ConsumerConfig{Durable: "snoop"}.JetStreamConfig())
		require.Error(t, err)
	})

	t.Run("billing's credentials read the time of its oldest message, for its gauge", func(t *testing.T) {
		t.Parallel()
		nc, _ := connectAs(t, s, "billing", billingPassword)
		resp, err := nc.Request("$JS.API.STREAM.MSG.GET."+stream.Name, []byte(`{"seq":1,"next_by_subj":"labeling.events.>"}`), 2*time.Second)
		require.NoError(t, err, "allowed: an answer, not a permissions violation")
		require.NotContains(t, string(resp.Data), "permission")
	})

	t.Run("labeling's credentials cannot consume billing's durable", func(t *testing.T) {
		t.Parallel()
		nc, err := nats.Connect(labelingURL, nats.CustomInboxPrefix(stream.InboxPrefix("labeling")))
		require.NoError(t, err)
		defer nc.Close()
		_, err = nc.Request("$JS.API.CONSUMER.MSG.NEXT."+stream.Name+".billing", []byte(`{"batch":1,"expires":500000000}`), 2*time.Second)
		require.Error(t, err)
	})

	t.Run("a durable labeling may not create keeps its publishes refused, saying why", func(t *testing.T) {
		t.Parallel()
		p := publisher(t, labelingURL, "billing", "audit") // the file lets labeling create billing's only
		before := msgs()
		var err error
		eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			err = p.Publish(ctx, message("RuleActivated"))
			return err != nil && strings.Contains(err.Error(), "consumer audit")
		}, "refused for the durable it could not make")
		require.Equal(t, before, msgs(), "nothing published the stream might not keep for audit")
	})

	t.Run("a client cannot read another's replies", func(t *testing.T) {
		t.Parallel()
		nc, err := nats.Connect(billingURL, nats.CustomInboxPrefix(stream.InboxPrefix("billing")))
		require.NoError(t, err)
		defer nc.Close()
		errs := make(chan error, 1)
		nc.SetErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case errs <- err:
			default:
			}
		})
		_, err = nc.SubscribeSync(stream.InboxPrefix("labeling") + ".>")
		require.NoError(t, err) // refused asynchronously
		select {
		case err := <-errs:
			require.ErrorIs(t, err, nats.ErrPermissionViolation)
		case <-time.After(5 * time.Second):
			t.Fatal("the server let billing subscribe to labeling's inbox")
		}
	})
}

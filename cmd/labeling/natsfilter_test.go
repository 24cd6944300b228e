package main

import (
	"context"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
	"github.com/acme/outboxpair/migrations"
)

// TestNATSConsumerTypes: labeling makes each durable of NATS_CONSUMERS with
// the types of its NATS_CONSUMER_<NAME>_TYPES, and the stream keeps for it only
// those; a bad list stops start-up with one line naming the variable.
func TestNATSConsumerTypes(t *testing.T) {
	t.Parallel()

	t.Run("a durable made with NATS_CONSUMER_<NAME>_TYPES gets only its types, one without gets every type", func(t *testing.T) {
		t.Parallel()
		ns := natsServer(t)
		db := pgtest.New(t, migrations.Labeling)
		env := baseEnv(db.URL)
		env["EVENTS_TRANSPORT"] = "nats"
		env["NATS_URL"] = ns.ClientURL()
		env["NATS_CONSUMERS"] = "billing,ledger"
		env["NATS_CONSUMER_LEDGER_TYPES"] = "RuleActivated"
		env["OUTBOX_POLL_INTERVAL"] = "50ms"
		p := proctest.Start(t, binary(t), env, "serve")
		base := "http://" + p.ListenAddr(t)
		post := poster(t, base)

		// Both consumers away: every row is settled on what the durables
		// labeling made take.
		org, id := uuid.NewString(), uuid.NewString()
		require.Equal(t, http.StatusCreated, post("/v1/orgs/"+org+"/rules", `{"id":"`+id+`","name":"n","pattern":"p","label":"l"}`))
		require.Equal(t, http.StatusOK, post("/v1/orgs/"+org+"/rules/"+id+"/activate", ""))
		require.Equal(t, http.StatusOK, post("/v1/orgs/"+org+"/rules/"+id+"/deactivate", ""))
		require.Eventually(t, func() bool {
			var pending int
			require.NoError(t, db.Pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_events WHERE processed_at IS NULL`).Scan(&pending))
			return pending == 0
		}, 30*time.Second, 50*time.Millisecond, "both rows settled")

		nc, err := nats.Connect(ns.ClientURL())
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		filter := func(durable string) []string {
			c, err := js.Consumer(context.Background(), stream.Name, durable)
			require.NoError(t, err)
			return stream.Applied(c.CachedInfo().Config)
		}
		require.Equal(t, []string{"labeling.events.RuleActivated"}, filter("ledger"))
		require.Equal(t, []string{"labeling.events.>"}, filter("billing"))

		// Read as labeling made them: a consumer's own service would update
		// its durable to its own types.
		got := map[string][]string{}
		for _, durable := range []string{"billing", "ledger"} {
			c, err := js.Consumer(context.Background(), stream.Name, durable)
			require.NoError(t, err)
			for deadline := time.Now().Add(30 * time.Second); ; {
				b, err := c.Fetch(10, jetstream.FetchMaxWait(200*time.Millisecond))
				require.NoError(t, err)
				for m := range b.Messages() {
					got[durable] = append(got[durable], m.Subject())
					require.NoError(t, m.Ack())
				}
				info, err := c.Info(context.Background())
				require.NoError(t, err)
				if info.NumPending == 0 && info.NumAckPending == 0 {
					break
				}
				require.True(t, time.Now().Before(deadline), "%s still has messages pending", durable)
			}
		}
		require.ElementsMatch(t, []string{"labeling.events.RuleActivated", "labeling.events.RuleDeactivated"}, got["billing"])
		require.Equal(t, []string{"labeling.events.RuleActivated"}, got["ledger"], "the ledger only its type")
		require.Eventually(t, func() bool {
			st, err := js.Stream(context.Background(), stream.Name)
			require.NoError(t, err)
			return st.CachedInfo().State.Msgs == 0
		}, 30*time.Second, 20*time.Millisecond, "and the stream keeps nothing more")

		p.Signal(t, syscall.SIGTERM)
		require.Equal(t, 0, p.Wait(t, 30*time.Second).ExitCode(), p.Stderr.String())
	})

	t.Run("a type labeling does not publish in NATS_CONSUMER_<NAME>_TYPES stops start-up with a line naming it", func(t *testing.T) {
		t.Parallel()
		env := baseEnv("postgres://postgres@127.0.0.1:1/none")
		env["EVENTS_TRANSPORT"] = "nats"
		env["NATS_URL"] = "nats://127.0.0.1:1"
		env["NATS_CONSUMERS"] = "billing,ledger"
		env["NATS_CONSUMER_LEDGER_TYPES"] = "RuleActivated,RuleRenamed"
		p := proctest.Start(t, binary(t), env)
		require.Equal(t, exitFail, p.Wait(t, 30*time.Second).ExitCode())
		stderr := p.Stderr.String()
		require.True(t, strings.HasPrefix(stderr, `labeling: NATS_CONSUMER_LEDGER_TYPES: "RuleRenamed" is not an event type labeling publishes`), stderr)
		require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
	})
}

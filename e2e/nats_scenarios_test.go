package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// TestNATSDown freezes the JetStream server (SIGSTOP) under load for a second,
// kills it (SIGKILL), keeps it down for three seconds, and restarts it on the
// same port and store: both services
// stay up and ready (readiness reflects the database only), labeling keeps
// answering, its rows wait in the outbox and are retried, none is dead-lettered
// within the attempt budget, and every event is applied once.
func TestNATSDown(t *testing.T) {
	t.Parallel()
	c := setup(t, config{transport: transportNATS})
	ctx := context.Background()
	pids := map[*proc]int{c.lab(): c.lab().pid(), c.billing: c.billing.pid()}
	readyz := func(p *proc) int {
		status, _, err := c.send(ctx, p.url(), http.MethodGet, "/readyz", nil)
		require.NoError(t, err)
		return status
	}

	l := startLoad(t, c, loadOptions{clients: 4, rules: 3, maxOps: 1000, pace: 20 * time.Millisecond})
	l.waitOps(t, 10)
	waitFor(t, convergeTimeout, func() bool { return c.receiptCount(t) > 0 }, "billing applies events from the stream")

	// First the server hangs (SIGSTOP): what clients write then sits in socket
	// buffers and is never stored, so a publisher that settled a row without the
	// broker's ack would lose it. Then it dies holding those bytes.
	node := c.nats[0]
	frozen := c.receiptCount(t)
	node.signal(syscall.SIGSTOP)
	<-time.After(time.Second)
	t.Logf("kill -9 %s (pid %d) after 1s frozen, for 3s", node.name, node.life.Pid())
	node.kill()
	down := time.Now()
	l.waitOps(t, 20) // labeling answers its clients without the broker
	for _, p := range []*proc{c.lab(), c.billing} {
		require.Equal(t, http.StatusOK, readyz(p), "%s stays ready without NATS", p.name)
	}
	<-time.After(3*time.Second - time.Since(down))
	pending := 0
	for _, r := range c.outboxRows(t) {
		if r.ProcessedAt == nil {
			pending++
		}
	}
	require.Positive(t, pending, "rows wait in the outbox while the broker is down")
	node.start()
	t.Logf("%s restarted after %s with %d rows waiting (%d events applied before the freeze)", node.name,
		time.Since(down).Round(time.Millisecond), pending, frozen)

	l.waitOps(t, 10)
	l.finish(t)
	s, _ := c.requireConverged(t)
	l.requireFinalStates(t, s)
	retried := 0
	for _, r := range s.outbox {
		if r.Attempts > 1 {
			retried++
		}
	}
	t.Logf("%d of %d rows were published on a retry", retried, len(s.outbox))
	require.Positive(t, retried, "the outage was felt: rows were retried")
	for p, pid := range pids {
		require.Equal(t, pid, p.pid(), "%s was not restarted", p.name)
	}
}

// TestNATSCluster runs a three-node JetStream cluster on loopback with the
// stream replicated on all three (R3), and under load kills (SIGKILL) the node
// that leads the stream: the survivors elect a new leader, labeling and billing
// reconnect to them, the killed node is restarted and rejoins, and the
// invariant holds: zero events lost, zero applied twice.
func TestNATSCluster(t *testing.T) {
	t.Parallel()
	c := setup(t, config{transport: transportNATS, natsNodes: 3})
	js := natsClient(t, c.nats)

	l := startLoad(t, c, loadOptions{clients: 4, rules: 3, maxOps: 1000, pace: 20 * time.Millisecond})
	l.waitOps(t, 10)
	waitFor(t, convergeTimeout, func() bool { return c.receiptCount(t) >= 20 }, "billing applies events from the stream")
	var leader string
	waitFor(t, convergeTimeout, func() bool { leader = streamLeader(t, js); return leader != "" }, "the stream has a leader")
	var victim *natsNode
	for _, n := range c.nats {
		if n.name == leader {
			victim = n
		}
	}
	require.NotNil(t, victim, "the leader %q is one of ours", leader)

	receipts := c.receiptCount(t)
	t.Logf("kill -9 the stream leader %s (pid %d) with %d events applied", victim.name, victim.life.Pid(), receipts)
	victim.kill()
	killed := time.Now()
	var next string
	waitFor(t, convergeTimeout, func() bool {
		next = streamLeader(t, js)
		return next != "" && next != leader
	}, "the survivors elect a new stream leader")
	t.Logf("new stream leader %s after %s", next, time.Since(killed).Round(time.Millisecond))
	l.waitOps(t, 20)
	waitFor(t, convergeTimeout, func() bool { return c.receiptCount(t) > receipts }, "delivery goes on through the new leader")

	victim.start()
	l.waitOps(t, 10)
	l.finish(t)
	s, _ := c.requireConverged(t)
	l.requireFinalStates(t, s)
	t.Logf("%d events, %d duplicates absorbed by receipts, %d by the broker", len(s.outbox),
		c.billing.duplicatesSoFar(t), c.lab().duplicatesSoFar(t))
}

// TestNATSDurableDeleted deletes the stream's durables (billing's and the audit
// one) while billing is down, as a cleanup or a stream tool might, then
// activates rules: the interest stream acks those publishes and keeps nothing,
// so labeling must not settle a row on such an ack. It makes the durables
// again and publishes again what may have been dropped (once its id has left
// the duplicate window, 3s here), and when billing starts every event is
// applied exactly once and the quota is what the activations made it.
func TestNATSDurableDeleted(t *testing.T) {
	t.Parallel()
	c := setup(t, config{transport: transportNATS, billingDown: true, maxAttempts: 200,
		env: map[string]string{"NATS_DUPLICATE_WINDOW": "3s"}})
	ctx := context.Background()
	js := natsClient(t, c.nats)
	for _, durable := range []string{"billing", auditDurable} {
		waitFor(t, convergeTimeout, func() bool {
			_, err := js.Consumer(ctx, stream.Name, durable)
			return err == nil
		}, "labeling made the durable "+durable)
		require.NoError(t, js.DeleteConsumer(ctx, stream.Name, durable))
	}

	const n = 10
	org := uuid.New()
	for range n {
		id := uuid.New()
		_, _, err := c.sendUntil(ctx, c.lab, http.MethodPost, rulesPath(org), newRuleBody(id), http.StatusCreated)
		require.NoError(t, err)
		_, _, err = c.sendUntil(ctx, c.lab, http.MethodPost, rulePath(org, id, "activate"), nil, http.StatusOK)
		require.NoError(t, err)
	}
	waitFor(t, convergeTimeout, func() bool {
		rows := c.outboxRows(t)
		for _, r := range rows {
			require.Nil(t, r.FailedAt, "a row failed while the durable was missing: %s", r)
			if r.ProcessedAt == nil {
				return false
			}
		}
		return len(rows) == n
	}, "every row is published once the durables exist again")
	waited := 0
	for _, r := range c.outboxRows(t) {
		if strings.Contains(deref(r.LastError), "not known to be kept") {
			waited++
		}
		require.Equal(t, 1, r.Attempts, "waiting for the durable and the window spent no attempt: %s", r)
	}
	require.Positive(t, waited, "a publish acked while the durable was missing was not settled")

	c.billing.restart(t)
	s, _ := c.requireConverged(t)
	require.Len(t, s.outbox, n)
	require.EqualValues(t, n, c.quota(t, org), "every activation applied once")
}

// TestNATSTokenFixedThenReplayed is issue 25's first mistake on the binaries:
// billing consumes with another EVENTS_TOKEN than labeling signs with, so every
// genuine message fails its signature, is recorded in billing_nats_failed and
// terminated, and labeling settles its rows. The operator fixes the token and
// runs `billing nats replay --all`: every event is applied once, and a second
// replay applies nothing.
func TestNATSTokenFixedThenReplayed(t *testing.T) {
	t.Parallel()
	c := setup(t, config{transport: transportNATS, billingDown: true})
	right := c.billing.env["EVENTS_TOKEN"]
	c.billing.env["EVENTS_TOKEN"] = "not-labelings-token"
	c.billing.restart(t)
	ctx := context.Background()

	const n = 6
	org := uuid.New()
	for range n {
		id := uuid.New()
		_, _, err := c.sendUntil(ctx, c.lab, http.MethodPost, rulesPath(org), newRuleBody(id), http.StatusCreated)
		require.NoError(t, err)
		_, _, err = c.sendUntil(ctx, c.lab, http.MethodPost, rulePath(org, id, "activate"), nil, http.StatusOK)
		require.NoError(t, err)
	}
	// The operator's command, as the binary with only what it reads.
	command := func(token string, args ...string) (string, int) {
		p := proctest.Start(t, billingBin, map[string]string{
			"DATABASE_URL": c.billing.env["DATABASE_URL"], "EVENTS_TOKEN": token,
		}, append([]string{"nats"}, args...)...)
		state := p.Wait(t, time.Minute)
		return p.Stdout.String(), state.ExitCode()
	}
	waitFor(t, convergeTimeout, func() bool {
		out, code := command(right, "failed")
		return code == 0 && strings.Count(out, "\n") == n
	}, "every message recorded for its signature")
	// Labeling settles on the publish ack, in batches: a row may still be
	// unsettled when billing has already recorded its message.
	waitFor(t, convergeTimeout, func() bool {
		rows := c.outboxRows(t)
		for _, r := range rows {
			if r.ProcessedAt == nil {
				return false
			}
		}
		return len(rows) == n // one RuleActivated a rule; a create appends none
	}, "labeling settled every row on its publish ack")
	require.Zero(t, c.quota(t, org), "nothing applied under the wrong token")

	// The fix: billing gets labeling's token, then the replay.
	_, _ = c.billing.terminate(t)
	c.billing.env["EVENTS_TOKEN"] = right
	c.billing.restart(t)
	out, code := command(right, "replay", "--all")
	require.Equal(t, 0, code, out)
	require.Equal(t, fmt.Sprintf("replayed %d of %d records\n", n, n), out)
	require.EqualValues(t, n, c.quota(t, org), "every event applied once")
	out, code = command(right, "replay", "--all")
	require.Equal(t, 0, code, out)
	require.Equal(t, "replayed 0 of 0 records\n", out, "a second replay finds nothing")
	require.EqualValues(t, n, c.quota(t, org), "nothing applied twice")
	s, _ := c.requireConverged(t)
	require.Len(t, s.outbox, n)
}

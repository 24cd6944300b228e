package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// TestNATSDurableCheck is issue 32's finding 9 on the binaries: the durable
// check (labeling settles a row only if every durable kept its message) with
// relay settings a user may choose, 10 attempts 100ms to 1s apart and a 20s
// lease, which a wait counted as an attempt used to turn into dead letters.
// Billing's durable is the stream's only one, so the interest stream removes
// each message once billing acked it. On both dialects:
//   - nats-server killed for 5s under 100 activations and restarted on its
//     store: no row dead-lettered, though billing consumed messages whose
//     publish was acked again after the restart;
//   - labeling killed after a publish, before its settle: the republish, a
//     duplicate of a message billing consumed, is settled;
//   - billing's durable deleted while billing is down: the messages dropped for
//     no interest are published again once their ids left the duplicate
//     window, every event is applied within the window and a poll, and no
//     attempt is spent waiting.
func TestNATSDurableCheck(t *testing.T) {
	t.Parallel()
	for _, d := range dbtest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			t.Parallel()
			t.Run("nats-server killed for 5s under 100 activations and restarted on its store: none dead-lettered, each applied once", func(t *testing.T) {
				t.Parallel()
				natsKilledUnderActivations(t, d)
			})
			t.Run("labeling killed after a publish, before its settle: the republish of the consumed message is settled", func(t *testing.T) {
				t.Parallel()
				labelingKilledAfterPublish(t, d)
			})
			t.Run("billing's durable deleted while billing is down: every event applied within the duplicate window and a poll, no attempt spent", func(t *testing.T) {
				t.Parallel()
				durableDeletedWhileBillingDown(t, d)
			})
		})
	}
}

// durableCheckConfig is the scenarios' cluster: billing's durable alone, and
// the relay settings of the issue.
func durableCheckConfig(d sqldb.Dialect) config {
	return config{dialect: d, transport: transportNATS, billingDurableOnly: true, lease: 20 * time.Second, maxAttempts: 10,
		env: map[string]string{"OUTBOX_RETRY_BASE": "100ms", "OUTBOX_RETRY_MAX": "1s"}}
}

// billingDurableCreated waits until labeling has made billing's durable and
// returns its creation time.
func (c *cluster) billingDurableCreated(t *testing.T) time.Time {
	t.Helper()
	js := natsClient(t, c.nats)
	var created time.Time
	waitFor(t, convergeTimeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		cons, err := js.Consumer(ctx, stream.Name, "billing")
		if err != nil {
			return false
		}
		created = cons.CachedInfo().Created
		return true
	}, "labeling made billing's durable")
	return created
}

// waitDurableOlderThanSkew waits until billing's durable was made more than
// stream.ClockSkew ago: the rows of a running system, appended long after it.
// (A row appended within ClockSkew of the durable's making, acked again after
// billing consumed its message, waits for the duplicate window instead.)
func (c *cluster) waitDurableOlderThanSkew(t *testing.T) {
	t.Helper()
	created := c.billingDurableCreated(t)
	waitFor(t, stream.ClockSkew+10*time.Second, func() bool {
		return time.Since(created) > stream.ClockSkew+500*time.Millisecond
	}, "billing's durable is older than the clock skew")
}

// activateRules creates and activates n rules of org, one after the other,
// each request retried until answered.
func (c *cluster) activateRules(ctx context.Context, org uuid.UUID, n int) error {
	for range n {
		id := uuid.New()
		if _, _, err := c.sendUntil(ctx, c.lab, http.MethodPost, rulesPath(org), newRuleBody(id), http.StatusCreated, http.StatusOK); err != nil {
			return err
		}
		if _, _, err := c.sendUntil(ctx, c.lab, http.MethodPost, rulePath(org, id, "activate"), nil, http.StatusOK); err != nil {
			return err
		}
	}
	return nil
}

func natsKilledUnderActivations(t *testing.T, d sqldb.Dialect) {
	c := setup(t, durableCheckConfig(d))
	c.waitDurableOlderThanSkew(t)
	ctx := context.Background()

	const clients, perClient = 4, 25
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			org := uuid.New()
			if err := c.activateRules(ctx, org, perClient); err != nil {
				errs <- fmt.Errorf("org %s: %w", org, err)
			}
		}()
	}
	waitFor(t, convergeTimeout, func() bool { return c.receiptCount(t) >= 20 }, "billing applies events from the stream")
	node := c.nats[0]
	t.Logf("kill -9 %s (pid %d) with %d events applied, for 5s", node.name, node.life.Pid(), c.receiptCount(t))
	node.kill()
	<-time.After(5 * time.Second)
	node.start()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	s, _ := c.requireConverged(t)
	require.Len(t, s.outbox, clients*perClient, "one event per activation")
	retried, most := 0, 0
	for _, r := range s.outbox {
		if r.Attempts > 1 {
			retried++
		}
		most = max(most, r.Attempts)
	}
	t.Logf("%d of %d rows were published on a retry, the most after %d attempts of %d", retried, len(s.outbox), most, c.cfg.maxAttempts)
}

func labelingKilledAfterPublish(t *testing.T, d sqldb.Dialect) {
	cfg := durableCheckConfig(d)
	cfg.labelingFailpoints = failpoint.RelayAfterDispatch + "=exit"
	c := setup(t, cfg)
	c.waitDurableOlderThanSkew(t)
	ctx := context.Background()

	org, id := uuid.New(), uuid.New()
	status, b, err := c.send(ctx, c.lab().url(), http.MethodPost, rulesPath(org), newRuleBody(id))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, status, "%s", b)
	if _, _, err := c.send(ctx, c.lab().url(), http.MethodPost, rulePath(org, id, "activate"), nil); err != nil {
		require.ErrorIs(t, err, errTransport)
		t.Logf("the relay published before the activation answered: %v", err)
	}
	c.lab().requireDiedAt(t, failpoint.RelayAfterDispatch)
	rows := c.outboxRows(t)
	require.Len(t, rows, 1)
	require.Nil(t, rows[0].ProcessedAt, "died before the settle")
	waitFor(t, 5*time.Second, func() bool { return c.receiptCount(t) == 1 }, "billing consumed the published event")

	c.lab().restart(t)
	_, _, err = c.sendUntil(ctx, c.lab, http.MethodPost, rulePath(org, id, "activate"), nil, http.StatusOK)
	require.NoError(t, err)
	require.NoError(t, c.activateRules(ctx, org, 5))
	// The unsettled row comes back when its lease (20s) ends: its publish is
	// acked as a duplicate of a message billing consumed, which the stream no
	// longer holds.
	s, _ := c.requireConverged(t)
	require.Len(t, s.outbox, 6)
	require.EqualValues(t, 6, c.quota(t, org), "every activation applied once")
	waitFor(t, 5*time.Second, func() bool { return c.lab().duplicatesSoFar(t) >= 1 },
		"the unsettled row was published again and acked as a duplicate")
}

func durableDeletedWhileBillingDown(t *testing.T, d sqldb.Dialect) {
	// A short window, so that the scenario ends within seconds, and still
	// longer than the attempts' budget (10 attempts at most 1s apart).
	const window = 10 * time.Second
	cfg := durableCheckConfig(d)
	cfg.billingDown = true
	cfg.env["NATS_DUPLICATE_WINDOW"] = window.String()
	c := setup(t, cfg)
	ctx := context.Background()
	c.billingDurableCreated(t)
	require.NoError(t, natsClient(t, c.nats).DeleteConsumer(ctx, stream.Name, "billing"))

	const orgs, perOrg = 4, 5
	for range orgs {
		require.NoError(t, c.activateRules(ctx, uuid.New(), perOrg))
	}
	appended := time.Now()
	c.billing.restart(t)

	s, _ := c.requireConverged(t)
	took := time.Since(appended)
	require.Len(t, s.outbox, orgs*perOrg)
	// Each row waits from its append for the window, the server's purge of
	// its id (1s of grace) and a poll; billing then applies it at once.
	bound := window + time.Second + 3*time.Second
	t.Logf("every event applied %s after the last activation (window %s)", took.Round(time.Millisecond), window)
	require.LessOrEqual(t, took, bound, "applied within the window and a poll")
	for _, r := range s.outbox {
		require.Equal(t, 1, r.Attempts, "waiting spent no attempt: %s", r)
	}
}

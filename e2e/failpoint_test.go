package e2e

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// TestFailpointExit kills a process with SIGKILL at each dangerous point of
// contract section 6, checks it died exactly there with the fact either fully
// committed or not at all, restarts it without the failpoint, lets the client
// retry, and requires the invariant: one activation, one event, applied once.
func TestFailpointExit(t *testing.T) {
	t.Parallel()

	// activateOnce creates a rule and activates it while the armed process may
	// die under the request. It returns the org, the rule, and the activation's
	// error: nil for a 200, errTransport when the process died before answering.
	activateOnce := func(t *testing.T, c *cluster) (org, id uuid.UUID, activateErr error) {
		ctx := context.Background()
		org, id = uuid.New(), uuid.New()
		status, b, err := c.send(ctx, c.lab().url(), http.MethodPost, rulesPath(org), newRuleBody(id))
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, status, "%s", b)
		status, b, err = c.send(ctx, c.lab().url(), http.MethodPost, rulePath(org, id, "activate"), nil)
		if err != nil {
			require.ErrorIs(t, err, errTransport)
			return org, id, err
		}
		require.Equal(t, http.StatusOK, status, "%s", b)
		return org, id, nil
	}

	// retryAndConverge is the client after the restart: it retries the create
	// (a replay answers 200 with the stored rule) and the activation, then the
	// invariant must hold with exactly one event, applied once.
	retryAndConverge := func(t *testing.T, c *cluster, org, id uuid.UUID) {
		ctx := context.Background()
		target := c.lab
		status, b, err := c.sendUntil(ctx, target, http.MethodPost, rulesPath(org), newRuleBody(id), http.StatusOK, http.StatusCreated)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, status, "a retried create is a replay: %s", b)
		_, b, err = c.sendUntil(ctx, target, http.MethodPost, rulePath(org, id, "activate"), nil, http.StatusOK)
		require.NoError(t, err)
		require.True(t, decodeRule(t, b).Active)

		s, _ := c.requireConverged(t)
		require.Len(t, s.outbox, 1, "one activation, one event, however often the request was sent")
		require.Len(t, s.receipts, 1)
		require.EqualValues(t, 1, s.quota[org])
		require.EqualValues(t, 1, c.quota(t, org), "billing's API agrees")
	}

	for _, d := range dbtest.Dialects {
		for _, tr := range transports {
			t.Run(string(d)+"/"+tr, func(t *testing.T) {
				t.Parallel()
				failpointScenarios(t, d, tr, activateOnce, retryAndConverge)
			})
		}
	}
}

// failpointScenarios are TestFailpointExit's cases on databases of dialect d
// over transport tr: with
// nats, the relay's subscriber publishes to JetStream and billing consumes the
// stream, so a row is settled once the broker acked it, and billing's
// after-commit point is billing.nats.after-commit (before the ack).
func failpointScenarios(t *testing.T, d sqldb.Dialect, tr string,
	activateOnce func(t *testing.T, c *cluster) (org, id uuid.UUID, activateErr error),
	retryAndConverge func(t *testing.T, c *cluster, org, id uuid.UUID),
) {
	t.Run("labeling killed after the activation commits: the retry answers 200 and the event exists once", func(t *testing.T) {
		t.Parallel()
		point := failpoint.LabelingActivateAfterCommit
		c := setup(t, config{dialect: d, transport: tr, labelingFailpoints: point + "=exit"})
		org, id, err := activateOnce(t, c)
		require.ErrorIs(t, err, errTransport, "the client must see no answer: the process dies before the response")
		c.lab().requireDiedAt(t, point)

		require.True(t, c.ruleActive(t, id), "died after the commit: the activation is stored")
		require.Len(t, c.outboxRows(t), 1, "died after the commit: its event is stored with it")

		c.lab().restart(t)
		retryAndConverge(t, c, org, id)
	})

	t.Run("relay killed after the claim: the lease expires and another claim delivers", func(t *testing.T) {
		t.Parallel()
		point := failpoint.RelayAfterClaim
		c := setup(t, config{dialect: d, transport: tr, labelingFailpoints: point + "=exit", claimSize: 2, handlerTimeout: time.Second, lease: 3 * time.Second})
		org, id, err := activateOnce(t, c)
		if err != nil {
			t.Logf("the relay claimed before the activation answered: %v", err)
		}
		c.lab().requireDiedAt(t, point)

		rows := c.outboxRows(t)
		require.Len(t, rows, 1)
		require.Nil(t, rows[0].ProcessedAt)
		require.NotNil(t, rows[0].ClaimedUntil, "died holding the claim")
		require.Zero(t, c.receiptCount(t), "died before any dispatch")

		c.lab().restart(t)
		retryAndConverge(t, c, org, id)
	})

	t.Run("relay killed after billing applied, before the settle: redelivered, applied once", func(t *testing.T) {
		t.Parallel()
		point := failpoint.RelayAfterDispatch
		c := setup(t, config{dialect: d, transport: tr, labelingFailpoints: point + "=exit", claimSize: 2, handlerTimeout: time.Second, lease: 3 * time.Second})
		org, id, err := activateOnce(t, c)
		if err != nil {
			t.Logf("the relay dispatched before the activation answered: %v", err)
		}
		c.lab().requireDiedAt(t, point)

		rows := c.outboxRows(t)
		require.Len(t, rows, 1)
		require.Nil(t, rows[0].ProcessedAt, "died before the settle")
		// Over HTTP billing answered before the relay died; over NATS the broker
		// acked and billing consumes on its own.
		waitFor(t, 5*time.Second, func() bool { return c.receiptCount(t) == 1 }, "billing applied the delivery")

		c.lab().restart(t)
		retryAndConverge(t, c, org, id)
		if tr == transportNATS {
			waitFor(t, 5*time.Second, func() bool { return c.lab().duplicatesSoFar(t) >= 1 },
				"the unsettled row is published again and the broker acks it as a duplicate")
			require.Zero(t, c.billing.duplicatesSoFar(t), "the broker dropped the republish: billing saw the event once")
		} else {
			waitFor(t, 5*time.Second, func() bool { return c.billing.duplicatesSoFar(t) >= 1 },
				"the unsettled row is delivered again and billing answers it as already applied")
		}
	})

	t.Run("billing killed before its commit: nothing applied, delivered again until applied", func(t *testing.T) {
		t.Parallel()
		point := failpoint.BillingEventsBeforeCommit
		c := setup(t, config{dialect: d, transport: tr, billingFailpoints: point + "=exit"})
		org, id, err := activateOnce(t, c)
		require.NoError(t, err)
		c.billing.requireDiedAt(t, point)

		require.Zero(t, c.receiptCount(t), "died before the commit: no receipt")
		requireSettledBy(t, c, tr)

		c.billing.restart(t)
		retryAndConverge(t, c, org, id)
	})

	t.Run("billing killed after its commit, before its 204 or ack: redelivered, answered as already applied", func(t *testing.T) {
		t.Parallel()
		point := failpoint.BillingEventsAfterCommit
		if tr == transportNATS {
			point = failpoint.BillingNATSAfterCommit
		}
		c := setup(t, config{dialect: d, transport: tr, billingFailpoints: point + "=exit"})
		org, id, err := activateOnce(t, c)
		require.NoError(t, err)
		c.billing.requireDiedAt(t, point)

		require.Equal(t, 1, c.receiptCount(t), "died after the commit: the receipt is stored")
		requireSettledBy(t, c, tr)

		c.billing.restart(t)
		retryAndConverge(t, c, org, id)
		waitFor(t, 5*time.Second, func() bool { return c.billing.duplicatesSoFar(t) >= 1 },
			"the redelivery reached billing and was answered as already applied")
	})
}

// requireSettledBy checks the one row after billing died holding its event:
// over HTTP labeling never got the 204, so the row is pending and the relay
// delivers it again; over NATS the row was settled on the broker's ack, and the
// message waits in the stream for billing's redelivery.
func requireSettledBy(t *testing.T, c *cluster, tr string) {
	t.Helper()
	if tr == transportNATS {
		waitFor(t, 5*time.Second, func() bool {
			rows := c.outboxRows(t)
			require.Len(t, rows, 1)
			return rows[0].ProcessedAt != nil
		}, "the row is settled once the broker acked the publish")
		return
	}
	rows := c.outboxRows(t)
	require.Len(t, rows, 1)
	require.Nil(t, rows[0].ProcessedAt, "labeling never got the 204")
}

package e2e

// The second hop's scenarios (issue 28): billing applies labeling's event and,
// in the same transaction, appends a QuotaChanged row to its own outbox
// (billing_outbox_events); its relay calls the provider (the stand-in,
// cmd/provider) with the row id as Idempotency-Key. The invariant
// (requireConverged, invariant_test.go) covers both hops when the cluster has
// a provider (config.provider); the scenarios here kill billing at each
// dangerous point of the second hop while the provider goes down and up.

import (
	"context"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/sqldb"
)

// TestSecondHop kills billing at every dangerous point of its outbox, one after
// the other in one cluster, while the provider is down and up, over each
// dialect and transport of the first hop:
//
//  1. the provider is down; billing dies right after the apply's commit
//     (billing.events.after-commit over HTTP, billing.nats.after-commit over
//     NATS): the receipt, the quota and the QuotaChanged row are stored together,
//     and no call was made;
//  2. the provider is up; billing restarts and its relay dies after claiming the
//     row (outbox.relay.after-claim): the row is claimed, the provider has
//     applied nothing;
//  3. billing restarts; once the claim's lease runs out, its relay calls the
//     provider, which applies the change, and dies before the settle
//     (outbox.relay.after-dispatch);
//  4. the provider goes down; billing restarts unarmed; three more changes on two
//     orgs; every row's call fails (the provider is down, the first row's lease
//     ran out again); the provider comes up.
//
// Then both hops converge: every change reaches the provider's applied count
// exactly once, the first one although it was called after its apply (a
// duplicate the provider absorbs), and the provider's count of each org equals
// billing's quota and labeling's active rules.
func TestSecondHop(t *testing.T) {
	t.Parallel()
	eachDialectTransport(t, secondHop)
}

func secondHop(t *testing.T, d sqldb.Dialect, tr string) {
	provider := startStandIn(t, 0)
	provider.down() // down from the start: billing's first call cannot reach it
	commitPoint := failpoint.BillingEventsAfterCommit
	if tr == transportNATS {
		commitPoint = failpoint.BillingNATSAfterCommit
	}
	c := setup(t, config{dialect: d, transport: tr, provider: provider, billingFailpoints: commitPoint + "=exit",
		handlerTimeout: time.Second, lease: 2 * time.Second})
	ctx := context.Background()
	create := func(org, id uuid.UUID) {
		t.Helper()
		_, _, err := c.sendUntil(ctx, c.lab, http.MethodPost, rulesPath(org), newRuleBody(id), http.StatusCreated)
		require.NoError(t, err)
	}
	change := func(org, id uuid.UUID, action string) {
		t.Helper()
		_, _, err := c.sendUntil(ctx, c.lab, http.MethodPost, rulePath(org, id, action), nil, http.StatusOK)
		require.NoError(t, err)
	}
	org, org2 := uuid.New(), uuid.New()
	r1, r2, r3 := uuid.New(), uuid.New(), uuid.New()

	// 1. Killed between the commit and the call.
	create(org, r1)
	change(org, r1, "activate")
	c.billing.requireDiedAt(t, commitPoint)
	require.Equal(t, 1, c.receiptCount(t), "died after the commit: the receipt is stored")
	rows := c.billingOutboxRows(t)
	require.Len(t, rows, 1, "died after the commit: the QuotaChanged row is stored with the receipt")
	require.Nil(t, rows[0].ProcessedAt, "no call was made: the provider is down")
	first := rows[0].ID
	t.Logf("1. billing died after the commit of %s, its call not made", first)

	// 2. Killed after the claim.
	provider.up()
	c.billing.restartArmed(t, failpoint.RelayAfterClaim+"=exit")
	c.billing.requireDiedAt(t, failpoint.RelayAfterClaim)
	rows = c.billingOutboxRows(t)
	require.Len(t, rows, 1)
	require.Nil(t, rows[0].ProcessedAt)
	require.NotNil(t, rows[0].ClaimedUntil, "died holding the claim")
	a := provider.applied()
	require.Zero(t, a.Applied+a.Duplicates, "died before any call reached the provider: %+v", a)
	t.Logf("2. billing's relay died holding the claim of %s (attempts=%d)", first, rows[0].Attempts)

	// 3. Killed after the call, before the settle.
	c.billing.restartArmed(t, failpoint.RelayAfterDispatch+"=exit")
	c.billing.requireDiedAt(t, failpoint.RelayAfterDispatch)
	rows = c.billingOutboxRows(t)
	require.Len(t, rows, 1)
	require.Nil(t, rows[0].ProcessedAt, "died before the settle")
	a = provider.applied()
	require.EqualValues(t, 1, a.Applied, "the provider applied the change before billing died: %+v", a)
	require.EqualValues(t, 1, a.ByOrg[org.String()])
	t.Logf("3. billing's relay died after the provider applied %s, before the settle", first)

	// 4. The provider down, more changes, the provider up again.
	provider.down()
	c.billing.restart(t)
	create(org, r2)
	change(org, r2, "activate") // org: 2
	create(org2, r3)
	change(org2, r3, "activate")  // org2: 1
	change(org, r1, "deactivate") // org: 1
	waitFor(t, convergeTimeout, func() bool {
		rows = c.billingOutboxRows(t)
		for _, r := range rows {
			require.Nil(t, r.ProcessedAt, "no call can succeed while the provider is down: %s", r)
			if r.LastError == nil {
				return false
			}
		}
		return len(rows) == 4
	}, "billing applies every change and each row's call fails while the provider is down")
	t.Logf("4. every call failed while the provider was down: %s", rows)
	provider.up()

	s, _ := c.requireConverged(t)
	require.Len(t, s.outbox, 4, "3 activations and a deactivation")
	require.Len(t, s.billOutbox, 4, "one QuotaChanged row per change")
	for _, r := range s.billOutbox {
		want := 2 // a call that failed while the provider was down, then the one it answered
		if r.ID == first {
			want = 4 // the claim that died, the call before the settle, a failed call, the call answered
		}
		require.GreaterOrEqual(t, r.Attempts, want, "%s", r)
	}
	a = provider.applied()
	require.EqualValues(t, 4, a.Applied, "each change applied once: %+v", a)
	require.GreaterOrEqual(t, a.Duplicates, int64(1), "the first change, called again after its apply, was absorbed: %+v", a)
	require.Equal(t, map[string]int64{org.String(): 1, org2.String(): 1}, a.ByOrg)
	require.EqualValues(t, 1, c.quota(t, org), "billing's API agrees")
	require.EqualValues(t, 1, c.quota(t, org2), "billing's API agrees")
}

// TestSecondHopUnderLoad kills billing with SIGKILL at random moments while
// clients change rules, so that the kills land anywhere in the second hop
// (inside an apply, between its commit and the relay's call, during a call,
// before a settle), and keeps the provider down for a while in between; the
// provider also answers 503 to every fifth call after applying it (an answer
// lost after its commit, PROVIDER_FAIL_EVERY). Every state change a client was
// answered 200 for reaches the provider exactly once.
func TestSecondHopUnderLoad(t *testing.T) {
	t.Parallel()
	eachDialectTransport(t, secondHopUnderLoad)
}

func secondHopUnderLoad(t *testing.T, d sqldb.Dialect, tr string) {
	provider := startStandIn(t, 5)
	c := setup(t, config{dialect: d, transport: tr, provider: provider, handlerTimeout: time.Second, lease: 2 * time.Second})
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill schedule seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	pause := func() { <-time.After(500*time.Millisecond + time.Duration(rng.Int64N(int64(500*time.Millisecond)))) }

	l := startLoad(t, c, loadOptions{clients: 3, rules: 2, maxOps: 1000, pace: 20 * time.Millisecond})
	// Three kills of billing; the provider goes down after the first and comes
	// back after the second, so rows appended meanwhile wait and are retried.
	for i := range 3 {
		pause()
		l.waitOps(t, 5)
		t.Logf("kill -9 billing (pid %d)", c.billing.pid())
		c.billing.kill()
		c.billing.restart(t)
		switch i {
		case 0:
			provider.down()
		case 1:
			provider.up()
		}
	}
	pause()
	l.waitOps(t, 5)
	l.finish(t)

	s, _ := c.requireConverged(t)
	l.requireFinalStates(t, s)
	a := provider.applied()
	require.EqualValues(t, len(s.outbox), a.Applied, "one change applied by the provider per state change the clients made: %+v", a)
	t.Logf("the provider applied %d changes and absorbed %d duplicates (%d answers lost by PROVIDER_FAIL_EVERY since its restart)",
		a.Applied, a.Duplicates, a.Injected)
}

package e2e

// Fan-out's scenarios (issue 33): the ledger (ledger_test.go) is a second
// consumer beside billing, subscribed to RuleActivated only. Each runs on
// both dialects and both transports and ends in the invariant, which then
// says: every event applied exactly once by each subscriber of its type,
// and by no other.

import (
	"fmt"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/sqldb"
)

// TestFanoutKills kills each consumer at its crash points, then at random
// moments, while clients change rules: billing before and after its commit,
// the ledger before and after its own, one after the other, each restarted
// at once; then a SIGKILL of each, in random order 0.5–1.5s apart (the seed
// is logged).
// Each consumer absorbs the redeliveries its deaths cause, and the other one
// goes on meanwhile.
func TestFanoutKills(t *testing.T) {
	t.Parallel()
	eachDialectTransport(t, fanoutKills)
}

func fanoutKills(t *testing.T, d sqldb.Dialect, tr string) {
	billAfter, ledgerAfter := failpoint.BillingEventsAfterCommit, ledger.FailpointAfterCommit
	if tr == transportNATS {
		billAfter, ledgerAfter = failpoint.BillingNATSAfterCommit, ledger.FailpointNATSAfterCommit
	}
	// Armed with a count, so that each dies under the load, a few applies in.
	c := setup(t, config{dialect: d, transport: tr,
		billingFailpoints: failpoint.BillingEventsBeforeCommit + "=3*exit",
		ledger:            &ledgerConfig{failpoints: ledger.FailpointBeforeCommit + "=2*exit"}})
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill schedule seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	lg := c.ledger

	l := startLoad(t, c, loadOptions{clients: 4, rules: 3, maxOps: 1000, pace: 20 * time.Millisecond})
	c.billing.requireDiedAt(t, failpoint.BillingEventsBeforeCommit)
	t.Logf("billing died before its commit")
	c.billing.restartArmed(t, billAfter+"=2*exit")
	lg.requireDiedAt(t, ledger.FailpointBeforeCommit)
	t.Logf("the ledger died before its commit")
	lg.proc.restartArmed(t, ledgerAfter+"=1*exit")
	c.billing.requireDiedAt(t, billAfter)
	t.Logf("billing died after its commit")
	c.billing.restart(t)
	lg.requireDiedAt(t, ledgerAfter)
	t.Logf("the ledger died after its commit")
	lg.proc.restart(t)

	victims := []*proc{c.billing, lg.proc}
	rng.Shuffle(len(victims), func(i, j int) { victims[i], victims[j] = victims[j], victims[i] })
	for _, v := range victims {
		<-time.After(500*time.Millisecond + time.Duration(rng.Int64N(int64(time.Second))))
		l.waitOps(t, 5)
		t.Logf("kill -9 %s (pid %d)", v.name, v.pid())
		if v == lg.proc {
			lg.kill()
		} else {
			v.kill()
		}
		v.restart(t)
	}
	l.waitOps(t, 5)
	l.finish(t)

	s := c.requireLedgerConverged(t)
	l.requireFinalStates(t, s)
	require.Positive(t, c.billing.duplicatesSoFar(t), "billing absorbed the redelivery of what it committed before dying")
	require.Positive(t, lg.proc.duplicatesSoFar(t), "the ledger absorbed the redelivery of what it committed before dying")
}

// subscriberOutage is how long the ledger stays down in TestSubscriberDown:
// 8s in CI, E2E_SUBSCRIBER_OUTAGE (a Go duration, e.g. 2m) by hand.
func subscriberOutage(t *testing.T) time.Duration {
	t.Helper()
	v := os.Getenv("E2E_SUBSCRIBER_OUTAGE")
	if v == "" {
		return 8 * time.Second
	}
	d, err := time.ParseDuration(v)
	require.NoError(t, err, "E2E_SUBSCRIBER_OUTAGE")
	return d
}

// TestSubscriberDown keeps the ledger down while clients change rules, and
// billing keeps up: the first half of the outage the ledger is frozen
// (SIGSTOP: a delivery to it hangs until the relay's handler timeout, the
// worst a subscriber can do to its sender), the second half it is dead
// (SIGKILL: refused). Billing applies every event of the outage while the
// ledger is still down, with a p99 latency below the handler timeout (a
// billing delivery that waited behind a call to the frozen ledger would
// wait that long), and logs it beside its p99 with the ledger up. The ledger
// then restarts and applies every RuleActivated it missed, once.
func TestSubscriberDown(t *testing.T) {
	t.Parallel()
	eachDialectTransport(t, subscriberDown)
}

func subscriberDown(t *testing.T, d sqldb.Dialect, tr string) {
	outage := subscriberOutage(t)
	up := min(max(outage/2, 3*time.Second), time.Minute)
	const retryMax = 500 * time.Millisecond // OUTBOX_RETRY_MAX (relayEnv)
	// Room for the ledger's deliveries to be retried through the whole outage
	// at the retry cap without one dead-lettered.
	c := setup(t, config{dialect: d, transport: tr, ledger: &ledgerConfig{},
		maxAttempts: 25 + int(outage/retryMax)})
	lg := c.ledger

	l := startLoad(t, c, loadOptions{clients: 2, rules: 3, maxOps: 1 << 30, pace: 50 * time.Millisecond})
	t0 := time.Now()
	l.waitOps(t, 5)
	<-time.After(up - time.Since(t0))

	lg.proc.harvest() // its duplicates so far: a frozen process answers no /metrics
	lg.proc.current().Signal(t, syscall.SIGSTOP)
	t1 := time.Now() // an event created from here on cannot reach the ledger before it restarts
	t.Logf("the ledger is frozen (SIGSTOP) for %s", outage/2)
	<-time.After(outage / 2)
	lg.kill()
	t.Logf("the ledger is killed (SIGKILL) and stays down %s", outage-outage/2)
	<-time.After(outage - time.Since(t1))
	t2 := time.Now()

	// Billing kept up: every event of the outage is applied while the ledger
	// is still down; the ledger's wait.
	waitFor(t, 5*time.Second, func() bool {
		s, err := c.read(t.Context())
		require.NoError(t, err)
		for _, r := range s.outbox {
			if r.CreatedAt < t2.UnixMilli() && !s.receipts[r.ID] {
				return false
			}
		}
		return true
	}, "billing applies every event of the outage while the ledger is down")
	s, err := c.read(t.Context())
	require.NoError(t, err)
	waiting := 0
	for _, r := range s.outbox {
		if r.Tag == ledgerType && r.CreatedAt > t1.UnixMilli() {
			_, ok := s.ledger.receipts[r.ID]
			require.False(t, ok, "the ledger is down: it applied nothing of the outage: %s", r)
			waiting++
		}
	}
	require.Positive(t, waiting, "RuleActivated events wait for the ledger")
	attempts, lastError := 0, ""
	for _, r := range s.ledger.deliveries {
		require.Nil(t, r.FailedAt, "no delivery to the ledger is dead-lettered by the outage: %s", r)
		if r.ProcessedAt == nil && r.Attempts > attempts {
			attempts, lastError = r.Attempts, deref(r.LastError)
		}
	}
	if tr == transportHTTP {
		t.Logf("the ledger's deliveries retried up to %d attempts, the last error of that row: %s", attempts, lastError)
	}

	before := c.billingLatencies(t, t0.Add(500*time.Millisecond), t1)
	during := c.billingLatencies(t, t1, t2)
	t.Logf("billing's latency with the ledger up: %s", before)
	t.Logf("billing's latency during the ledger's %s outage: %s (%d RuleActivated wait for the ledger)", outage, during, waiting)
	half := t1.Add(outage / 2)
	t.Logf("billing's latency while the ledger was frozen: %s; while it was dead: %s",
		c.billingLatencies(t, t1, half), c.billingLatencies(t, half, t2))
	ledgerTally.add(func(k *ledgerCounts) {
		k.latencies = append(k.latencies, fmt.Sprintf("%s: billing p99 %s with the ledger up (%d events), %s during its %s outage (%d events)",
			t.Name(), before.quantile(0.99), len(before), during.quantile(0.99), outage, len(during)))
	})
	require.NotEmpty(t, before)
	require.NotEmpty(t, during)
	require.Less(t, during.quantile(0.99), c.cfg.handlerTimeout,
		"billing's deliveries wait for no call to the frozen ledger (its p99 with the ledger up: %s)", before.quantile(0.99))

	lg.proc.restart(t)
	back := time.Now()
	// The ledger catches up on the outage's backlog: bounded by the outage.
	waitFor(t, convergeTimeout+outage/2, func() bool {
		s, err := c.read(t.Context())
		require.NoError(t, err)
		for _, r := range s.outbox {
			if _, ok := s.ledger.receipts[r.ID]; r.Tag == ledgerType && !ok {
				return false
			}
		}
		return true
	}, "the restarted ledger applies every RuleActivated it missed")
	t.Logf("the restarted ledger applied every RuleActivated it missed in %s", time.Since(back).Round(time.Millisecond))
	l.waitOps(t, 5)
	l.finish(t)
	s = c.requireLedgerConverged(t)
	l.requireFinalStates(t, s)
}

package e2e

import (
	"context"
	"math/rand/v2"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/failpoint"
)

// TestDatabaseCrash SIGKILLs every process of the scenario's own PostgreSQL
// cluster (the postmaster and all its children) three times under load, at
// random moments (the seed is logged), and restarts it each time on the same
// data directory and port, where it replays its WAL: both services notice
// (/readyz 503), reconnect by themselves once it is back (the same processes,
// /readyz 200, labeling answers, billing applies), and every state change a
// client was answered 200 for is stored and applied exactly once.
func TestDatabaseCrash(t *testing.T) {
	t.Parallel()
	eachTransport(t, databaseCrash)
}

func databaseCrash(t *testing.T, tr string) {
	pg := startPGServer(t)
	c := setup(t, config{transport: tr, pg: pg})
	pids := c.servicePIDs()

	seed := uint64(time.Now().UnixNano())
	t.Logf("crash schedule seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	l := startLoad(t, c, loadOptions{clients: 4, rules: 3, maxOps: 1000, pace: 20 * time.Millisecond})
	for round := 1; round <= 3; round++ {
		c.requireWorking(t, l)
		// At a random moment of the load: requests, claims and settles in flight.
		<-time.After(time.Duration(rng.Int64N(int64(time.Second))))
		began := time.Now()
		killed := pg.crash(t)
		for _, p := range c.services() {
			waitFor(t, 10*time.Second, func() bool { return c.readyz(p) == http.StatusServiceUnavailable },
				"%s notices its database is gone", p.name)
		}
		// Down for a second at least, so relay ticks and requests fail meanwhile.
		<-time.After(time.Second - time.Since(began))
		pg.restart(t)
		t.Logf("crash %d: SIGKILLed %d PostgreSQL processes; up again after %s", round, killed, time.Since(began).Round(time.Millisecond))
		for _, p := range c.services() {
			waitFor(t, convergeTimeout, func() bool { return c.readyz(p) == http.StatusOK },
				"%s reconnects to the restarted database without a restart of its own", p.name)
		}
	}
	c.requireWorking(t, l)
	l.finish(t)

	s, _ := c.requireConverged(t)
	l.requireFinalStates(t, s)
	c.requireSameProcesses(t, pids)
}

// The partition scenario's bounds: small, so that a request, a relay tick and a
// stop each end quickly while the database is unreachable.
const (
	partitionRequestTimeout = 2 * time.Second // HTTP_REQUEST_TIMEOUT
	// answerMargin is what a 503 may take beyond the request deadline: writing
	// it, on a machine busy with other scenarios.
	answerMargin = 1500 * time.Millisecond
	// exitMargin is what a stop may take beyond its budget: the process's exit
	// and reaping, on a busy machine.
	exitMargin = time.Second
	// orchestratorGrace is what an orchestrator gives a SIGTERM before it
	// SIGKILLs (Kubernetes' default): every accepted setting stops within it.
	orchestratorGrace = 30 * time.Second
	// lockBound is how long after a heal a transaction the partition abandoned
	// may still hold its locks: a few seconds, not until the scenario ends.
	lockBound = 10 * time.Second
)

// stopBudget is the stop budget of contract section 5 for a service whose
// HTTP_REQUEST_TIMEOUT is requestTimeout: the HTTP drain (the timeout plus 2s),
// then the relay (labeling) or the NATS consumer (billing) 8s, retention 2s,
// and 2s for the pool's close and the flush of spans.
func stopBudget(requestTimeout time.Duration) time.Duration {
	return requestTimeout + 2*time.Second + 8*time.Second + 2*time.Second + 2*time.Second
}

// TestPartition puts a TCP proxy that can blackhole between each service and
// its database (blackholeProxy: connections stay open, bytes are dropped) and
// partitions both twice under load, while billing holds each delivery's quota
// row locked for 300ms before its commit, so that a partition always abandons
// transactions that hold locks. During the first partition every request that
// needs the database is answered 503 within HTTP_REQUEST_TIMEOUT plus a margin
// and both /readyz answer 503; after the heal no abandoned transaction is open
// for more than a few seconds, and both services recover without a restart.
// During the second, SIGTERM to both services ends within the stop budget,
// with the exit code contract section 5 gives such a stop (labeling 1 when it
// left claims to their lease, else 0; billing 0); after the heal and a restart
// the invariant holds: what a stop could not release was left to its lease,
// not lost.
func TestPartition(t *testing.T) {
	t.Parallel()
	eachTransport(t, partition)
}

func partition(t *testing.T, tr string) {
	pg := startPGServer(t)
	c := setup(t, config{
		transport: tr, pg: pg, proxied: true,
		// Longer than the partitioned stop (16s): a claim the stop could not
		// release is still in the future when the process has exited.
		lease: 20 * time.Second,
		// Each delivery holds its quota row locked for a while before its
		// commit, so a partition always cuts some between their writes and
		// their COMMIT: the transactions a partition abandons, with their locks.
		billingFailpoints: failpoint.BillingEventsBeforeCommit + "=sleep(300ms)",
		env: map[string]string{
			"HTTP_REQUEST_TIMEOUT": partitionRequestTimeout.String(),
			"DB_STATEMENT_TIMEOUT": "1s",
			"DB_LOCK_TIMEOUT":      "1s",
		},
	})
	pids := c.servicePIDs()
	l := startLoad(t, c, loadOptions{clients: 4, rules: 3, maxOps: 1000, pace: 20 * time.Millisecond})

	// 1: requests and readiness answer 503 in time; both recover by themselves.
	c.requireWorking(t, l)
	began := time.Now()
	heal := c.partition()
	c.requireAnswers503(t)
	for _, p := range c.services() {
		waitFor(t, 10*time.Second, func() bool { return c.readyz(p) == http.StatusServiceUnavailable },
			"%s's /readyz answers 503 during the partition", p.name)
	}
	<-time.After(3*time.Second - time.Since(began))
	heal()
	healed := time.Now()
	t.Logf("partition 1: healed after %s", time.Since(began).Round(time.Millisecond))
	c.requireNoAbandonedTransactions(t)
	for _, p := range c.services() {
		waitFor(t, convergeTimeout, func() bool { return c.readyz(p) == http.StatusOK },
			"%s is ready again after the heal without a restart", p.name)
	}
	ready := time.Since(healed)
	c.requireWorking(t, l)
	c.requireSameProcesses(t, pids)
	recovered := time.Since(healed)
	t.Logf("partition 1: both ready %s after the heal, both working %s after it", ready.Round(time.Millisecond), recovered.Round(time.Millisecond))
	tally.add(func(s *counts) { s.partitionRecovery = max(s.partitionRecovery, recovered) })

	// 2: SIGTERM to both while the database is unreachable.
	began = time.Now()
	heal = c.partition()
	for _, p := range c.services() {
		waitFor(t, 10*time.Second, func() bool { return c.readyz(p) == http.StatusServiceUnavailable },
			"%s's /readyz answers 503 during the partition", p.name)
	}
	states := c.requireStopsInBudget(t, stopBudget(partitionRequestTimeout))
	c.requireStopExitCodes(t, states)
	heal()
	t.Logf("partition 2: healed after %s", time.Since(began).Round(time.Millisecond))
	c.requireNoAbandonedTransactions(t)
	c.billing.restart(t)
	c.lab().restart(t)
	c.requireWorking(t, l)
	l.finish(t)

	s, _ := c.requireConverged(t)
	l.requireFinalStates(t, s)
}

// partition blackholes both services' database connections and returns the
// heal.
func (c *cluster) partition() (heal func()) {
	c.labProxy.partition()
	c.billProxy.partition()
	tally.add(func(s *counts) { s.partitions++ })
	return func() {
		c.labProxy.heal()
		c.billProxy.heal()
		c.t.Logf("partition: the proxies cut %d labeling and %d billing connections so far",
			c.labProxy.cutN.Load(), c.billProxy.cutN.Load())
	}
}

// requireNoAbandonedTransactions requires that, within lockBound of the heal
// just done, the database has ended every transaction of the services that the
// partition left waiting: a session idle in a transaction since before the
// heal has lost its client for good (a blackholeProxy connection stays cut),
// and the locks it holds would fail every request that needs them.
func (c *cluster) requireNoAbandonedTransactions(t *testing.T) {
	t.Helper()
	healed := time.Now()
	ctx := context.Background()
	var abandoned []string
	waitFor(t, lockBound, func() bool {
		// Read straight from the server, not through a proxy.
		rows, err := c.labDB.Pool.Query(ctx, `
			SELECT format('pid %s on %s (%s): %s for %s, holding %s locks, last query %s',
				a.pid, a.datname, a.application_name, a.state, clock_timestamp() - a.state_change,
				(SELECT count(*) FROM pg_locks l WHERE l.pid = a.pid AND l.granted), left(a.query, 60))
			FROM pg_stat_activity a
			WHERE a.datname = ANY($1) AND a.application_name IN ('e2e-labeling', 'e2e-billing')
				AND a.state LIKE 'idle in transaction%' AND a.state_change < $2`,
			[]string{c.labDB.Name, c.billDB.Name}, healed)
		if err != nil {
			return false
		}
		abandoned, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err == nil && len(abandoned) == 0
	}, "transactions the partition abandoned still open %s after the heal:\n%s", lockBound, &abandonedList{&abandoned})
	t.Logf("partition: no abandoned transaction open %s after the heal", time.Since(healed).Round(time.Millisecond))
}

// abandonedList prints the list as it is when the failure message is written.
type abandonedList struct{ rows *[]string }

func (a *abandonedList) String() string { return strings.Join(*a.rows, "\n") }

// requireAnswers503 sends, at once, requests that each need the database (a
// labeling read, a labeling activation of a rule that does not exist, so it
// can change nothing, and a billing read): each must be answered 503 within
// the request timeout plus answerMargin.
func (c *cluster) requireAnswers503(t *testing.T) {
	t.Helper()
	org := uuid.New()
	probes := []struct {
		p            *proc
		method, path string
	}{
		{c.lab(), http.MethodGet, rulesPath(org)},
		{c.lab(), http.MethodPost, rulePath(org, uuid.New(), "activate")},
		{c.billing, http.MethodGet, "/v1/orgs/" + org.String() + "/quota"},
	}
	type answer struct {
		status int
		body   []byte
		err    error
		took   time.Duration
	}
	answers := make([]answer, len(probes))
	var wg sync.WaitGroup
	for i, pr := range probes {
		wg.Go(func() {
			start := time.Now()
			status, body, err := c.send(context.Background(), pr.p.url(), pr.method, pr.path, nil)
			answers[i] = answer{status, body, err, time.Since(start)}
		})
	}
	wg.Wait() // bounded by the client's timeout
	var slowest time.Duration
	for i, a := range answers {
		pr := probes[i]
		require.NoError(t, a.err, "%s %s %s during the partition", pr.p.name, pr.method, pr.path)
		require.Equal(t, http.StatusServiceUnavailable, a.status, "%s %s %s during the partition: %s", pr.p.name, pr.method, pr.path, a.body)
		require.LessOrEqual(t, a.took, partitionRequestTimeout+answerMargin,
			"%s %s %s: the 503 comes within HTTP_REQUEST_TIMEOUT (%s) plus %s", pr.p.name, pr.method, pr.path, partitionRequestTimeout, answerMargin)
		t.Logf("partition: %s %s %s answered 503 in %s", pr.p.name, pr.method, pr.path, a.took.Round(time.Millisecond))
		slowest = max(slowest, a.took)
	}
	tally.add(func(s *counts) {
		s.partition503s += len(probes)
		s.slowest503 = max(s.slowest503, slowest)
	})
}

// requireStopsInBudget sends SIGTERM to every service at once and requires each
// to exit by itself (not killed by a signal) within budget plus exitMargin, and
// under an orchestrator's grace period. It returns each one's exit state.
func (c *cluster) requireStopsInBudget(t *testing.T, budget time.Duration) map[*proc]*os.ProcessState {
	t.Helper()
	require.Less(t, budget, orchestratorGrace, "the stop budget of contract section 5 is under %s", orchestratorGrace)
	procs := c.services()
	exited := make([]time.Duration, len(procs))
	var wg sync.WaitGroup
	start := time.Now()
	for i, p := range procs {
		require.True(t, p.alive(), "%s: SIGTERM to a dead process", p.name)
		p.harvest()
		life := p.current()
		life.Signal(t, syscall.SIGTERM)
		tally.add(func(s *counts) { s.terms++ })
		wg.Go(func() {
			select {
			case <-life.Done():
				exited[i] = time.Since(start)
			case <-time.After(budget + exitMargin + 5*time.Second):
				exited[i] = -1 // still running: proctest kills it when the test ends
			}
		})
	}
	wg.Wait()
	states := map[*proc]*os.ProcessState{}
	var longest time.Duration
	for i, p := range procs {
		require.NotEqual(t, time.Duration(-1), exited[i], "%s still running %s after SIGTERM during the partition (budget %s)",
			p.name, budget+exitMargin+5*time.Second, budget)
		state := p.current().Wait(t, 0)
		t.Logf("partition: %s stopped in %s after SIGTERM: %s", p.name, exited[i].Round(time.Millisecond), state)
		require.LessOrEqual(t, exited[i], budget+exitMargin, "%s stops within its budget (%s) while its database is unreachable", p.name, budget)
		require.True(t, state.Exited(), "%s exits by itself after SIGTERM, got %s", p.name, state)
		states[p] = state
		longest = max(longest, exited[i])
	}
	tally.add(func(s *counts) { s.partitionStop = max(s.partitionStop, longest) })
	return states
}

// requireStopExitCodes checks the exit codes of a stop with the database
// unreachable against contract section 5: 1 when the relay left claims it could
// not release to their lease, 0 when it left none (exit 0 promises that no
// unsettled row keeps a future claimed_until). Billing holds no claims: 0.
func (c *cluster) requireStopExitCodes(t *testing.T, states map[*proc]*os.ProcessState) {
	t.Helper()
	require.Equal(t, 0, states[c.billing].ExitCode(), "billing leaves nothing to release: its stop exits 0")
	var held []string
	now := time.Now().UnixMilli()
	for _, r := range c.outboxRows(t) { // read straight from the database, not through the proxy
		if r.ProcessedAt == nil && r.FailedAt == nil && r.ClaimedUntil != nil && *r.ClaimedUntil > now {
			held = append(held, r.String())
		}
	}
	code := states[c.lab()].ExitCode()
	t.Logf("partition: labeling exited %d leaving %d claims to their lease", code, len(held))
	// Exit 0 promises that no claim was left to its lease, so claims left
	// there must exit 1. The converse cannot hold: a settle sent just before
	// the partition may commit while its answer is dropped, so the relay cannot
	// tell that it did, and says so with exit 1 although nothing was left.
	if len(held) > 0 {
		require.Equal(t, 1, code, "labeling left claims to their lease, so its stop exits 1:\n%s", strings.Join(held, "\n"))
	}
	require.Contains(t, []int{0, 1}, code, "labeling's stop exits 0 or 1")
}

// services is every service process: billing, then the labeling processes.
func (c *cluster) services() []*proc { return append([]*proc{c.billing}, c.labeling...) }

// servicePIDs records each service's pid, for requireSameProcesses.
func (c *cluster) servicePIDs() map[*proc]int {
	pids := map[*proc]int{}
	for _, p := range c.services() {
		pids[p] = p.pid()
	}
	return pids
}

// requireSameProcesses requires each service to be the process pids recorded,
// never restarted: it recovered by itself.
func (c *cluster) requireSameProcesses(t *testing.T, pids map[*proc]int) {
	t.Helper()
	for p, pid := range pids {
		require.True(t, p.alive(), "%s survived", p.name)
		require.Equal(t, pid, p.pid(), "%s was not restarted", p.name)
		require.Equal(t, 1, p.starts, "%s was not restarted", p.name)
	}
}

// readyz is the status of p's /readyz, 0 when it gives no answer.
func (c *cluster) readyz(p *proc) int {
	status, _, err := c.send(context.Background(), p.url(), http.MethodGet, "/readyz", nil)
	if err != nil {
		return 0
	}
	return status
}

// requireWorking waits until both services work: labeling answers the load's
// clients and billing applies deliveries (its receipts grow).
func (c *cluster) requireWorking(t *testing.T, l *load) {
	t.Helper()
	ctx := context.Background()
	receipts := func() int {
		var n int
		if err := c.billDB.Pool.QueryRow(ctx, `SELECT count(*) FROM billing_receipts`).Scan(&n); err != nil {
			return -1 // the checker's own connection broke with the database; ask again
		}
		return n
	}
	var before int
	waitFor(t, convergeTimeout, func() bool { before = receipts(); return before >= 0 }, "the test reads billing_receipts")
	l.waitOps(t, 10)
	waitFor(t, convergeTimeout, func() bool { return receipts() > before }, "billing applies deliveries")
}

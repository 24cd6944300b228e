package e2e

import (
	"context"
	"math/rand/v2"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
)

// eachTransport runs fn as one parallel subtest per transport (http, nats).
func eachTransport(t *testing.T, fn func(t *testing.T, tr string)) {
	t.Helper()
	for _, tr := range transports {
		t.Run(tr, func(t *testing.T) {
			t.Parallel()
			fn(t, tr)
		})
	}
}

// eachDialectTransport runs fn as one parallel subtest per dialect and
// transport (postgres/http, postgres/nats, sqlite/http, sqlite/nats).
func eachDialectTransport(t *testing.T, fn func(t *testing.T, d sqldb.Dialect, tr string)) {
	t.Helper()
	for _, d := range dbtest.Dialects {
		for _, tr := range transports {
			t.Run(string(d)+"/"+tr, func(t *testing.T) {
				t.Parallel()
				fn(t, d, tr)
			})
		}
	}
}

// TestKillUnderLoad kills labeling or billing with SIGKILL at random moments
// while clients create, activate, deactivate and reactivate rules, restarting
// each at once: every rule ends in the state its client last set, and every
// state change reaches billing exactly once.
func TestKillUnderLoad(t *testing.T) {
	t.Parallel()
	eachDialectTransport(t, killUnderLoad)
}

func killUnderLoad(t *testing.T, d sqldb.Dialect, tr string) {
	c := setup(t, config{dialect: d, transport: tr})
	seed := uint64(time.Now().UnixNano())
	t.Logf("kill schedule seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	l := startLoad(t, c, loadOptions{clients: 4, rules: 3, maxOps: 1000, pace: 20 * time.Millisecond})
	// Six kills, three of each service in random order, 1-2s apart.
	victims := []*proc{c.lab(), c.billing, c.lab(), c.billing, c.lab(), c.billing}
	rng.Shuffle(len(victims), func(i, j int) { victims[i], victims[j] = victims[j], victims[i] })
	for _, v := range victims {
		pause := time.Second + time.Duration(rng.Int64N(int64(time.Second)))
		<-time.After(pause)
		l.waitOps(t, 5)
		t.Logf("kill -9 %s (pid %d)", v.name, v.pid())
		v.kill()
		v.restart(t)
	}
	l.waitOps(t, 5)
	l.finish(t)

	s, _ := c.requireConverged(t)
	l.requireFinalStates(t, s)
}

// TestBillingDown produces events while billing is not running: the rows are
// retried with a growing delay (every row reaches attempts >= 3, yet none uses
// up its 30 attempts in the 3s or more that billing stays away, which a retry on
// every 50ms poll would), and all are applied once billing comes up.
func TestBillingDown(t *testing.T) {
	t.Parallel()
	eachDialectTransport(t, billingDown)
}

func billingDown(t *testing.T, d sqldb.Dialect, tr string) {
	// At the 50ms poll, retrying on every tick would burn 30 attempts in 1.5s.
	c := setup(t, config{dialect: d, transport: tr, billingDown: true, maxAttempts: 30})
	ctx := context.Background()

	org := uuid.New()
	for i := range 6 {
		id := uuid.New()
		_, _, err := c.sendUntil(ctx, c.lab, http.MethodPost, rulesPath(org), newRuleBody(id), http.StatusCreated)
		require.NoError(t, err)
		_, _, err = c.sendUntil(ctx, c.lab, http.MethodPost, rulePath(org, id, "activate"), nil, http.StatusOK)
		require.NoError(t, err)
		if i%3 == 0 {
			_, _, err = c.sendUntil(ctx, c.lab, http.MethodPost, rulePath(org, id, "deactivate"), nil, http.StatusOK)
			require.NoError(t, err)
		}
	}
	down := time.Now()

	if tr == transportNATS {
		// The broker takes the events while billing is away: every row is settled
		// on its first attempt, and nothing is applied until billing consumes.
		waitFor(t, convergeTimeout, func() bool {
			rows := c.outboxRows(t)
			for _, r := range rows {
				if r.ProcessedAt == nil {
					return false
				}
				require.Equal(t, 1, r.Attempts, "published on the first attempt: %s", r)
			}
			return len(rows) == 8
		}, "every row is published while billing is down")
		<-time.After(time.Second - time.Since(down))
		require.Zero(t, c.receiptCount(t), "nothing is applied while billing is down")
	} else {
		// Billing stays away for at least 3s and until every row has been tried 3 times.
		waitFor(t, convergeTimeout, func() bool {
			rows := c.outboxRows(t)
			for _, r := range rows {
				require.Nil(t, r.ProcessedAt, "nothing can be delivered while billing is down: %s", r)
				require.Nil(t, r.FailedAt, "a row failed while billing was down: %s", r)
				if r.Attempts < 3 {
					return false
				}
			}
			return len(rows) == 8 && time.Since(down) >= 3*time.Second
		}, "every row is retried while billing is down")
	}

	c.billing.restart(t)
	s, _ := c.requireConverged(t)
	require.Len(t, s.outbox, 8, "6 activations and 2 deactivations")
	if tr == transportHTTP {
		for _, r := range s.outbox {
			require.Greater(t, r.Attempts, 1, "delivered on a retry: %s", r)
		}
	}
	require.EqualValues(t, 4, c.quota(t, org))
}

// TestReplicas runs three labeling processes on one labeling database, each
// with its own relay and no leader, with the load spread over them: every event
// is delivered and applied exactly once.
func TestReplicas(t *testing.T) {
	t.Parallel()
	eachDialectTransport(t, replicas)
}

func replicas(t *testing.T, d sqldb.Dialect, tr string) {
	// A generous handler timeout: no delivery outlives its lease even on a busy
	// machine, so any duplicate would come from two relays claiming one row.
	c := setup(t, config{dialect: d, transport: tr, replicas: 3, claimSize: 2, handlerTimeout: 5 * time.Second, lease: 10 * time.Second})

	l := startLoad(t, c, loadOptions{clients: 6, rules: 2, maxOps: 40, pace: 10 * time.Millisecond, replicas: true})
	// Every client's every op, counted from zero: ops answered before a
	// waitOps call would read its starting point are not lost from the count.
	waitFor(t, retryTimeout, func() bool { return l.ops.Load() >= 6*40 || l.failed() }, "the load ran to its end")
	l.finish(t)

	s, _ := c.requireConverged(t)
	l.requireFinalStates(t, s)
	dups := c.billing.duplicatesSoFar(t)
	t.Logf("%d events, %d duplicate deliveries", len(s.outbox), dups)
	require.Zero(t, dups, "with no crash, no row is dispatched by two relays")
	for _, p := range c.labeling {
		require.Zero(t, p.duplicatesSoFar(t), "with no crash, no row is published twice (%s)", p.name)
	}

	// No leader: the relays shared the work.
	working := 0
	for _, p := range c.labeling {
		processed, err := p.counter("outbox_events_processed_total", "")
		require.NoError(t, err)
		t.Logf("%s processed %v rows", p.name, processed[""])
		if processed[""] > 0 {
			working++
		}
	}
	require.GreaterOrEqual(t, working, 2, "more than one relay delivered rows")
}

// TestDatabaseCut cuts both services off their databases three times under
// load: the first time every backend of both is terminated
// (pg_terminate_backend), the next two times the databases also refuse new
// connections for a second, long enough for both to notice (/readyz answers
// 503) and for the relay's ticks to fail. Both recover by themselves (same
// processes, no restart) and the invariant holds.
func TestDatabaseCut(t *testing.T) {
	t.Parallel()
	eachTransport(t, databaseCut)
}

func databaseCut(t *testing.T, tr string) {
	c := setup(t, config{transport: tr})
	ctx := context.Background()
	pids := map[*proc]int{c.lab(): c.lab().pid(), c.billing: c.billing.pid()}
	admin, err := pgx.Connect(ctx, pgtest.ServerURL(t))
	require.NoError(t, err)
	t.Cleanup(func() { admin.Close(context.Background()) })
	dbs := []string{c.labDB.Name, c.billDB.Name}
	allowConnections := func(allow bool) {
		_, err := admin.Exec(ctx, `UPDATE pg_database SET datallowconn = $1 WHERE datname = ANY($2)`, allow, dbs)
		require.NoError(t, err)
	}
	readyz := func(p *proc) int {
		status, _, err := c.send(ctx, p.url(), http.MethodGet, "/readyz", nil)
		require.NoError(t, err)
		return status
	}

	l := startLoad(t, c, loadOptions{clients: 4, rules: 3, maxOps: 1000, pace: 20 * time.Millisecond})
	for round := 1; round <= 3; round++ {
		// Both services work again after the previous cut: labeling answers the
		// clients, billing applies deliveries.
		receipts := c.receiptCount(t)
		l.waitOps(t, 10)
		waitFor(t, convergeTimeout, func() bool { return c.receiptCount(t) > receipts }, "billing applies deliveries")
		<-time.After(500 * time.Millisecond)

		outage := round > 1
		began := time.Now()
		if outage {
			allowConnections(false)
		}
		var n int
		require.NoError(t, admin.QueryRow(ctx, `
			SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = ANY($1) AND application_name IN ('e2e-labeling', 'e2e-billing')`, dbs).Scan(&n))
		require.Positive(t, n, "the services held database connections to cut")
		tally.add(func(s *counts) { s.cuts += n })
		if outage {
			for _, p := range []*proc{c.lab(), c.billing} {
				waitFor(t, 5*time.Second, func() bool { return readyz(p) == http.StatusServiceUnavailable },
					"%s notices its database is gone", p.name)
			}
			<-time.After(time.Second - time.Since(began))
			allowConnections(true)
			t.Logf("cut %d: terminated %d backends, refused connections for %s", round, n, time.Since(began).Round(time.Millisecond))
		} else {
			t.Logf("cut %d: terminated %d backends", round, n)
		}
	}
	l.waitOps(t, 10)
	l.finish(t)

	s, _ := c.requireConverged(t)
	l.requireFinalStates(t, s)
	for p, pid := range pids {
		require.True(t, p.alive(), "%s survived the cuts", p.name)
		require.Equal(t, pid, p.pid(), "%s was not restarted", p.name)
		require.Equal(t, 1, p.starts, "%s was not restarted", p.name)
		require.Equal(t, http.StatusOK, readyz(p), "%s is ready again", p.name)
	}
}

// TestSIGTERMUnderLoad stops labeling with SIGTERM while deliveries are in flight
// (billing is slowed by a sleep before its commit; over NATS the relay also
// sleeps after each publish, before its settle, so claims are in flight) and
// then billing while it is applying deliveries: each exits 0 within the bound,
// labeling leaves no unsettled row with a future claim, and after restarts the
// invariant holds.
func TestSIGTERMUnderLoad(t *testing.T) {
	t.Parallel()
	eachTransport(t, sigtermUnderLoad)
}

func sigtermUnderLoad(t *testing.T, tr string) {
	cfg := config{
		transport:         tr,
		billingFailpoints: failpoint.BillingEventsBeforeCommit + "=sleep(500ms)",
		claimSize:         2, handlerTimeout: 2 * time.Second, lease: 4 * time.Second,
	}
	if tr == transportNATS {
		cfg.labelingFailpoints = failpoint.RelayAfterDispatch + "=sleep(300ms)"
	}
	c := setup(t, cfg)
	ctx := context.Background()
	inFlight := func() bool {
		var n int
		require.NoError(t, c.labDB.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events
			WHERE processed_at IS NULL AND failed_at IS NULL AND claimed_until > $1`, time.Now().UnixMilli()).Scan(&n))
		return n > 0
	}
	// billingBusy: billing has deliveries to apply. Over HTTP they are the
	// relay's claims in flight; over NATS, rows the broker acked that billing
	// has not applied yet (each apply takes 500ms here).
	billingBusy := inFlight
	if tr == transportNATS {
		billingBusy = func() bool {
			var processed int
			require.NoError(t, c.labDB.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events WHERE processed_at IS NOT NULL`).Scan(&processed))
			return processed > c.receiptCount(t)
		}
	}

	l := startLoad(t, c, loadOptions{clients: 4, rules: 3, maxOps: 1000, pace: 20 * time.Millisecond})
	l.waitOps(t, 10)
	waitFor(t, convergeTimeout, inFlight, "rows are being delivered")

	state, took := c.lab().terminate(t)
	t.Logf("labeling stopped in %s: %s", took, state)
	require.True(t, state.Success(), "labeling exits 0 on SIGTERM, got %s", state)
	require.False(t, inFlight(), "a stopped relay leaves no unsettled row claimed into the future")

	c.lab().restart(t)
	l.waitOps(t, 10)
	waitFor(t, convergeTimeout, billingBusy, "billing has deliveries to apply")
	state, took = c.billing.terminate(t)
	t.Logf("billing stopped in %s: %s", took, state)
	require.True(t, state.Success(), "billing exits 0 on SIGTERM, got %s", state)

	c.billing.restart(t)
	l.waitOps(t, 10)
	l.finish(t)
	s, _ := c.requireConverged(t)
	l.requireFinalStates(t, s)
}

// TestSIGTERMReleasesClaims stops labeling while a delivery outlasts the stop
// bound (over HTTP billing sleeps a minute before its commit; over NATS the
// server is frozen with SIGSTOP, so the publish waits for an ack that does not
// come): the relay abandons it and gives its claim back, so the process still
// exits 0 within the bound, the row is immediately claimable by another relay,
// and after restarts it is applied once.
func TestSIGTERMReleasesClaims(t *testing.T) {
	t.Parallel()
	eachTransport(t, sigtermReleasesClaims)
}

func sigtermReleasesClaims(t *testing.T, tr string) {
	cfg := config{transport: tr, claimSize: 1, handlerTimeout: 30 * time.Second, lease: 30 * time.Second}
	if tr == transportHTTP {
		cfg.billingFailpoints = failpoint.BillingEventsBeforeCommit + "=sleep(60s)"
	}
	c := setup(t, cfg)
	ctx := context.Background()
	if tr == transportNATS {
		c.nats[0].signal(syscall.SIGSTOP)
		t.Cleanup(func() { c.nats[0].signal(syscall.SIGCONT) })
	}
	org, id := uuid.New(), uuid.New()
	_, _, err := c.sendUntil(ctx, c.lab, http.MethodPost, rulesPath(org), newRuleBody(id), http.StatusCreated)
	require.NoError(t, err)
	_, _, err = c.sendUntil(ctx, c.lab, http.MethodPost, rulePath(org, id, "activate"), nil, http.StatusOK)
	require.NoError(t, err)
	waitFor(t, convergeTimeout, func() bool {
		rows := c.outboxRows(t)
		return len(rows) == 1 && rows[0].ClaimedUntil != nil && *rows[0].ClaimedUntil > time.Now().UnixMilli()
	}, "the row is claimed and its delivery is in flight")

	state, took := c.lab().terminate(t)
	t.Logf("labeling stopped in %s: %s", took, state)
	require.True(t, state.Success(), "labeling exits 0 on SIGTERM, got %s", state)
	rows := c.outboxRows(t)
	require.Len(t, rows, 1)
	require.Nil(t, rows[0].ProcessedAt, "the delivery never finished")
	if rows[0].ClaimedUntil != nil {
		require.LessOrEqual(t, *rows[0].ClaimedUntil, time.Now().UnixMilli(), "the abandoned claim was released: %s", rows[0])
	}

	if tr == transportNATS {
		c.nats[0].signal(syscall.SIGCONT)
	} else {
		c.billing.kill() // still asleep in the failpoint
		c.billing.restart(t)
	}
	c.lab().restart(t)
	s, took := c.requireConverged(t)
	require.Less(t, took, 10*time.Second, "the released row needs no lease (30s) to run out")
	require.EqualValues(t, 1, s.quota[org])
}

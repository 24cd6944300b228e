package main

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
	"github.com/acme/outboxpair/internal/testsupport/proxytest"
	"github.com/acme/outboxpair/migrations"
)

// SIGTERM while the database is blackholed, at the largest HTTP_REQUEST_TIMEOUT
// the configuration accepts: a request waits on the database and the relay holds
// a claim whose delivery never answers. The process still exits within its stop
// budget, which is under an orchestrator's 30 s, with 1 (contract section 5: a
// claim could not be released); the claim is left to its lease, the row still
// pending, nothing lost.
func TestStopWithBlackholedDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t, migrations.Labeling)
	dbURL, hole := proxytest.Via(t, db.URL)

	// A billing that never answers: the relay holds its claim.
	billingURL, delivered := hangingBilling(t)

	env := baseEnv(dbURL)
	env["BILLING_URL"] = billingURL
	env["HTTP_REQUEST_TIMEOUT"] = web.MaxRequestTimeout.String()
	env["OUTBOX_HANDLER_TIMEOUT"] = "60s"
	env["OUTBOX_CLAIM_SIZE"] = "1"
	env["OUTBOX_LEASE"] = "2m"
	p := proctest.Start(t, binary(t), env, "serve")
	base := "http://" + p.ListenAddr(t)
	client := &http.Client{Timeout: 2 * web.MaxRequestTimeout}
	post := func(path, body string) (int, error) {
		resp, err := client.Post(base+path, "application/json", strings.NewReader(body))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, nil
	}
	org, id := uuid.NewString(), uuid.NewString()
	code, err := post("/v1/orgs/"+org+"/rules", fmt.Sprintf(`{"id":%q,"name":"n","pattern":"p","label":"l"}`, id))
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	code, err = post("/v1/orgs/"+org+"/rules/"+id+"/activate", "")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	select {
	case <-delivered:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay never dispatched to the stand-in")
	}

	// The partition: then a request that waits on the database.
	hole.Partition()
	inflight := make(chan int, 1)
	go func() {
		code, err := post("/v1/orgs/"+org+"/rules", fmt.Sprintf(`{"id":%q,"name":"n","pattern":"p","label":"l"}`, uuid.NewString()))
		if err != nil {
			code = 0
		}
		inflight <- code
	}()
	require.Eventually(t, func() bool { return hole.Dropped() > 0 }, 10*time.Second, 5*time.Millisecond,
		"a statement went into the hole")

	budget, _ := stopBudget(t, env)
	start := time.Now()
	p.Signal(t, syscall.SIGTERM)
	require.Less(t, budget, service.StopGrace)
	// A second beyond the budget for the process to exit once its stop returns.
	state := p.Wait(t, budget+time.Second)
	took := time.Since(start)
	t.Logf("stopped in %s (budget %s): %s", took, budget, state)
	require.Less(t, took, service.StopGrace, "the stop ends before an orchestrator's SIGKILL")
	require.Equal(t, exitFail, state.ExitCode(), "a claim could not be released: %s", p.Stderr.String())
	// Every step ended by its share, so the stop reached its last one (the
	// pool) instead of being cut off by the whole budget.
	reachedPool := false
	for _, line := range p.LogLines(t) {
		msg, _ := line["msg"].(string)
		reachedPool = reachedPool || strings.HasPrefix(msg, "database pool")
	}
	require.True(t, reachedPool, "the stop reached the pool's step: %s", p.Stdout.Tail(20))
	t.Logf("stderr: %s", p.Stderr.String())

	select {
	case code := <-inflight:
		require.Equal(t, http.StatusServiceUnavailable, code, "the request in flight is answered 503")
	case <-time.After(5 * time.Second):
		t.Fatal("the request in flight was never answered")
	}

	// Nothing is lost: the row is pending, its claim left to its lease.
	var processed, failed *int64
	var claimedUntil *int64
	var attempts int
	err = db.Pool.QueryRow(ctx, `SELECT processed_at, failed_at, claimed_until, attempts FROM outbox_events
		WHERE payload->>'ruleId' = $1`, id).Scan(&processed, &failed, &claimedUntil, &attempts)
	require.NoError(t, err)
	require.Nil(t, processed)
	require.Nil(t, failed)
	require.NotNil(t, claimedUntil)
	require.Greater(t, *claimedUntil, time.Now().UnixMilli(), "the claim is left to its lease")
	require.Equal(t, 1, attempts, "the unsettled claim counts as the attempt it was")
}

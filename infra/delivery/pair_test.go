package delivery_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/delivery"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/labeling"
	"github.com/acme/outboxpair/migrations"
)

// pair is both services in one process, each on its own fresh database: labeling's
// use cases and relay, delivering over real HTTP to billing's real handler.
type pair struct {
	lab, bil *pgtest.DB
	rules    *labeling.Service
	down     *atomic.Bool // while true, billing answers 503 to everything
}

func setupPair(t *testing.T) pair {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := pair{lab: pgtest.New(t, migrations.Labeling), down: new(atomic.Bool)}
	_, bil, url := billingServer(t, p.down)
	p.bil = bil

	client := newClient(t, delivery.Config{BaseURL: url, Token: token, Timeout: 2 * time.Second, MaxIdleConns: 4})
	relay, err := outbox.NewRelay(outbox.NewPostgresStore(p.lab.Pool), outbox.Config{
		PollInterval:       20 * time.Millisecond,
		ClaimSize:          4,
		HandlerTimeout:     2 * time.Second,
		Lease:              10 * time.Second,
		MaxAttempts:        10,
		RetryBase:          20 * time.Millisecond,
		RetryMax:           200 * time.Millisecond,
		ProcessedRetention: time.Hour,
	}, []outbox.Subscriber{
		delivery.Subscriber[labeling.RuleActivated](client),
		delivery.Subscriber[labeling.RuleDeactivated](client),
	}, logger)
	require.NoError(t, err)
	require.NoError(t, relay.Start(context.Background()))
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, relay.Stop(ctx))
	})
	p.rules = labeling.NewService(postgres.NewDB(p.lab.Pool), relay)
	return p
}

// createRule creates an inactive rule in org and returns its id.
func (p pair) createRule(t *testing.T, org labeling.OrgID, n int) labeling.RuleID {
	t.Helper()
	nr, err := labeling.NewRuleFrom(uuid.NewString(), fmt.Sprintf("rule %d", n), "^INV-[0-9]+$", "invoice")
	require.NoError(t, err)
	r, created, err := p.rules.Create(context.Background(), org, nr)
	require.NoError(t, err)
	require.True(t, created)
	return r.ID
}

// converged waits until billing's quota of every org equals its active rules in
// labeling and every outbox row has its receipt, and reports the difference if not.
func (p pair) converged(t *testing.T, want map[labeling.OrgID]int64) {
	t.Helper()
	ctx := context.Background()
	var last string
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		last = ""
		for org, n := range want {
			var got int64
			err := p.bil.Pool.QueryRow(ctx, `SELECT coalesce((SELECT active_rules FROM billing_quota WHERE org_id = $1), 0)`, org.UUID()).Scan(&got)
			require.NoError(t, err)
			if got != n {
				last += fmt.Sprintf("org %s: quota %d, want %d\n", org, got, n)
			}
		}
		var rows, processed, receipts int
		require.NoError(t, p.lab.Pool.QueryRow(ctx,
			`SELECT count(*), count(processed_at) FROM outbox_events`).Scan(&rows, &processed))
		require.NoError(t, p.bil.Pool.QueryRow(ctx, `SELECT count(*) FROM billing_receipts`).Scan(&receipts))
		if processed != rows || receipts != rows {
			last += fmt.Sprintf("outbox rows %d, processed %d, receipts %d\n", rows, processed, receipts)
		}
		if last == "" {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("the pair did not converge:\n%s", last)
}

func TestPair(t *testing.T) {
	t.Parallel()

	t.Run("activations in labeling converge to billing's quota, then survive a billing outage", func(t *testing.T) {
		t.Parallel()
		p := setupPair(t)
		ctx := context.Background()
		want := map[labeling.OrgID]int64{}
		var deactivated []struct {
			org  labeling.OrgID
			rule labeling.RuleID
		}

		// Three orgs, four rules each: all activated, one deactivated again.
		for range 3 {
			org, err := labeling.ParseOrgID(uuid.NewString())
			require.NoError(t, err)
			for n := range 4 {
				id := p.createRule(t, org, n)
				_, err := p.rules.Activate(ctx, org, id)
				require.NoError(t, err)
				if n == 0 {
					_, err := p.rules.Deactivate(ctx, org, id)
					require.NoError(t, err)
					deactivated = append(deactivated, struct {
						org  labeling.OrgID
						rule labeling.RuleID
					}{org, id})
				}
			}
			want[org] = 3
		}
		p.converged(t, want)

		// Billing goes down; the reactivations wait in the outbox and are retried.
		p.down.Store(true)
		for _, d := range deactivated {
			_, err := p.rules.Activate(ctx, d.org, d.rule)
			require.NoError(t, err)
			want[d.org]++
		}
		require.Eventually(t, func() bool {
			var retried int
			err := p.lab.Pool.QueryRow(ctx, `SELECT count(*) FROM outbox_events
				WHERE processed_at IS NULL AND attempts >= 2`).Scan(&retried)
			return err == nil && retried == len(deactivated)
		}, 10*time.Second, 10*time.Millisecond, "every held event is retried while billing is down")

		p.down.Store(false)
		p.converged(t, want)

		var failed, retried int
		require.NoError(t, p.lab.Pool.QueryRow(ctx, `SELECT count(failed_at), count(*) FILTER (WHERE attempts > 1)
			FROM outbox_events`).Scan(&failed, &retried))
		require.Zero(t, failed, "no row is dead-lettered by an outage shorter than the retries")
		require.Equal(t, len(deactivated), retried, "the rows produced during the outage took more than one attempt")
	})
}

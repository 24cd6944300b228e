package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/standin"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

// quotaRow is a billing_outbox_events row as the provider is told it: its
// id and created_at (the call's id and occurredAt) and its payload.
type quotaRow struct {
	id        uuid.UUID
	createdAt int64
	change    billing.QuotaChanged
}

// quotaRows reads every QuotaChanged row of db, by org.
func quotaRows(t *testing.T, db *dbtest.DB) map[uuid.UUID][]quotaRow {
	t.Helper()
	rows := db.Query(t, `SELECT CAST(id AS text), created_at, CAST(payload AS text) FROM billing_outbox_events`)
	out := map[uuid.UUID][]quotaRow{}
	for rows.Next() {
		var id, payload string
		var r quotaRow
		require.NoError(t, rows.Scan(&id, &r.createdAt, &payload))
		r.id = uuid.MustParse(id)
		require.NoError(t, json.Unmarshal([]byte(payload), &r.change), payload)
		out[r.change.OrgID] = append(out[r.change.OrgID], r)
	}
	require.NoError(t, rows.Err())
	return out
}

// quotas reads billing_quota's active rules by org.
func quotas(t *testing.T, db *dbtest.DB) map[string]int64 {
	t.Helper()
	rows := db.Query(t, `SELECT CAST(org_id AS text), active_rules FROM billing_quota`)
	out := map[string]int64{}
	for rows.Next() {
		var org string
		var n int64
		require.NoError(t, rows.Scan(&org, &n))
		out[org] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// olderRuleWrong reports whether the rule providers were given before the
// version ("keep the newest occurredAt, then the highest id") keeps, for some
// org, another count than its highest version's: the inversion of issue 32.
func olderRuleWrong(byOrg map[uuid.UUID][]quotaRow) bool {
	for _, rows := range byOrg {
		newest, highest := rows[0], rows[0]
		for _, r := range rows[1:] {
			if r.createdAt > newest.createdAt || (r.createdAt == newest.createdAt && bytes.Compare(r.id[:], newest.id[:]) > 0) {
				newest = r
			}
			if r.change.Version > highest.change.Version {
				highest = r
			}
		}
		if newest.id != highest.id {
			return true
		}
	}
	return false
}

// inversions counts, over every org, the changes stamped (occurredAt, then
// id) before the change of the version below theirs: each a change that
// committed after one stamped later. rows are each org's in version order.
func inversions(byOrg map[uuid.UUID][]quotaRow) int {
	n := 0
	for _, rows := range byOrg {
		for i := 1; i < len(rows); i++ {
			a, b := rows[i-1], rows[i]
			if b.createdAt < a.createdAt || (b.createdAt == a.createdAt && bytes.Compare(b.id[:], a.id[:]) < 0) {
				n++
			}
		}
	}
	return n
}

// TestReplicasTellTheProviderTheLatestCount: two billing replicas on one
// database, each calling the stand-in provider, apply concurrent events of
// two orgs in rounds; after each round, once every QuotaChanged row reached
// the provider, the provider's count (its highest version's) is billing's
// quota for every org, and each org's versions are 1..N, one per change. The
// rounds go on until the rows show the inversion that made the older rule
// (newest occurredAt, then id) keep a stale count, so the test holds the case
// it exists for: a change stamped earlier that committed later.
func TestReplicasTellTheProviderTheLatestCount(t *testing.T) {
	t.Parallel()
	const (
		tok       = "cmd-test-token"
		perRound  = 100
		maxRounds = 150
	)
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := dbtest.New(t, d, migrations.Billing)
		provider := standIn(t)
		environ := env("DATABASE_URL="+db.URL, "EVENTS_TOKEN="+tok, "HTTP_ADDR=127.0.0.1:0", "AUTH_DISABLED=true",
			"PROVIDER_URL="+provider.URL+standin.Path, "PROVIDER_SECRET="+providerSecret,
			"OUTBOX_RETRY_BASE=100ms", "OUTBOX_RETRY_MAX=1s")
		replicas := []*server{startServer(t, environ), startServer(t, environ)}
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
		orgs := []uuid.UUID{uuid.New(), uuid.New()}

		// deliver posts event i to one replica until billing took it (a 503
		// under contention is retried, as labeling's relay would), for a
		// minute at most.
		deliver := func(i int) error {
			typ := billing.RuleActivated
			if i%3 == 2 {
				typ = billing.RuleDeactivated
			}
			id := uuid.Must(uuid.NewV7())
			body := fmt.Sprintf(`{"id":%q,"type":%q,"occurredAt":%s,"payload":{"orgId":%q,"ruleId":%q}}`,
				id, typ, occurredNow(), orgs[i%len(orgs)], uuid.New())
			url := "http://" + replicas[(i/2)%2].addr + "/internal/v1/events"
			var last string
			for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(body)))
				if err != nil {
					return err
				}
				req.Header.Set("Authorization", "Bearer "+tok)
				req.Header.Set("Idempotency-Key", id.String())
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					last = err.Error()
					continue
				}
				resp.Body.Close()
				if resp.StatusCode == http.StatusNoContent {
					return nil
				}
				last = resp.Status
			}
			return fmt.Errorf("event %d: not taken within a minute, last: %s", i, last)
		}

		inverted, sent, inverse := 0, 0, 0
		for round := 1; round <= maxRounds && inverted == 0; round++ {
			var wg sync.WaitGroup
			errs := make([]error, perRound)
			for i := range perRound {
				wg.Go(func() { errs[i] = deliver(sent + i) })
			}
			wg.Wait()
			require.NoError(t, errors.Join(errs...))
			sent += perRound

			var rows map[uuid.UUID][]quotaRow
			require.Eventually(t, func() bool {
				rows = quotaRows(t, db)
				n := 0
				for _, r := range rows {
					n += len(r)
				}
				return n == sent && appliedAt(t, provider.URL).Applied == int64(sent)
			}, time.Minute, 20*time.Millisecond, "round %d: every change appended once and applied by the provider", round)

			quota := quotas(t, db)
			got := appliedAt(t, provider.URL)
			require.Equal(t, quota, got.ByOrg, "round %d: the provider's count of each org is billing's quota", round)
			for org, rs := range rows {
				sort.Slice(rs, func(i, j int) bool { return rs[i].change.Version < rs[j].change.Version })
				for i, r := range rs {
					require.EqualValues(t, i+1, r.change.Version, "round %d: org %s's versions are 1..N, one per change", round, org)
				}
				require.Equal(t, quota[org.String()], rs[len(rs)-1].change.ActiveRules, "round %d: org %s's highest version carries its quota", round, org)
				require.EqualValues(t, len(rs), got.Versions[org.String()], "round %d: the provider holds org %s's highest version", round, org)
			}
			inverse = inversions(rows)
			if olderRuleWrong(rows) {
				inverted = round
			}
		}
		t.Logf("%s: the older rule would have kept a stale count after round %d (%d events, %d of them committed after a change stamped later)",
			d, inverted, sent, inverse)
		require.NotZero(t, inverted, "no round of %d events over two replicas reproduced a change stamped earlier that committed later", perRound)
	})
}

// Package pgbench runs the project's transactions with pgbench's own client,
// the floor any Go program on this machine competes with: billing's consumer
// transaction, labeling's producer transaction, and the pair reference, the
// SQL the pair runs per event (pair.go). Each script line is one statement,
// run with -M prepared (parameters, as pgx sends them).
package pgbench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/acme/outboxpair/bench/internal/sitting"
)

// ConsumerScript is billing's consumer transaction (infra/inbox's applySQL with
// billing's effect, billing/effect.go):
// one statement that inserts the receipt and, only for a new receipt, upserts
// the quota, committed on its own, as a lone delivery is applied (a group puts
// more events in the same arrays). Every receipt is new, as in a drain.
const ConsumerScript = `\set org random(0, 99)
WITH ev AS (SELECT * FROM unnest(ARRAY[gen_random_uuid()], ARRAY[md5('org' || :org)::uuid], ARRAY[1::bigint]) AS ev (event_id, org_id, delta)), fresh AS (INSERT INTO billing_receipts (event_id, created_at) SELECT event_id, (extract(epoch from clock_timestamp()) * 1000)::bigint FROM ev ORDER BY event_id ON CONFLICT DO NOTHING RETURNING event_id), quota AS (INSERT INTO billing_quota (org_id, active_rules, updated_at) SELECT ev.org_id, sum(ev.delta)::bigint, (extract(epoch from clock_timestamp()) * 1000)::bigint FROM fresh JOIN ev USING (event_id) GROUP BY ev.org_id ORDER BY ev.org_id ON CONFLICT (org_id) DO UPDATE SET active_rules = billing_quota.active_rules + EXCLUDED.active_rules, updated_at = EXCLUDED.updated_at) SELECT event_id FROM fresh;
`

// ProducerScript is labeling's activation (labeling/store.go SetActive, then
// outbox.Append's INSERT), in one transaction. Client c toggles its own 1,000
// rules in turn (variable i counts its transactions, -D i=0), so every UPDATE
// changes its row and is followed by an append, as in the Go producer.
const ProducerScript = `\set r :client_id * 1000 + :i % 1000
\set a 1 - (:i / 1000) % 2
BEGIN;
UPDATE labeling_rules SET active = :a::int::boolean, updated_at = GREATEST(updated_at, (extract(epoch from clock_timestamp()) * 1000)::bigint) WHERE org_id = md5('org' || (:r % 100))::uuid AND id = md5('rule' || :r)::uuid AND active <> :a::int::boolean RETURNING org_id, id, name, pattern, label, active, created_at, updated_at;
INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts) VALUES (gen_random_uuid(), CASE WHEN :a = 1 THEN 'RuleActivated' ELSE 'RuleDeactivated' END, jsonb_build_object('orgId', md5('org' || (:r % 100))::uuid, 'ruleId', md5('rule' || :r)::uuid), (extract(epoch from clock_timestamp()) * 1000)::bigint, (extract(epoch from clock_timestamp()) * 1000)::bigint, 0);
END;
\set i :i + 1
`

var tpsRE = regexp.MustCompile(`tps = ([0-9.]+) \(without initial connection time\)`)

// Run runs script on dbURL with clients clients for d (with -D i=0) and
// returns its tps (without connection time).
func Run(ctx context.Context, s *sitting.Sitting, dbURL, script string, clients int, d time.Duration) (float64, error) {
	f := filepath.Join(s.Tmp, fmt.Sprintf("script-%d.sql", time.Now().UnixNano()))
	if err := os.WriteFile(f, []byte(script), 0o600); err != nil {
		return 0, err
	}
	defer os.Remove(f)
	secs := max(1, int(d.Round(time.Second).Seconds()))
	// -T bounds the run; the context's timeout is a backstop.
	ctx, cancel := context.WithTimeout(ctx, d+time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, s.PgbenchPath, "-n", "-M", "prepared", "-f", f,
		"-c", strconv.Itoa(clients), "-j", strconv.Itoa(min(clients, 2)),
		"-T", strconv.Itoa(secs), "-D", "i=0", dbURL)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("pgbench: %w\n%s", err, out)
	}
	m := tpsRE.FindSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgbench: no tps in its output:\n%s", out)
	}
	return strconv.ParseFloat(string(m[1]), 64)
}

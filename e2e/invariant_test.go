package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/standin"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// convergeTimeout bounds how long the invariant may take to hold after a
// scenario's disturbance ends: a lease, a few retry delays and the deliveries.
const convergeTimeout = 30 * time.Second

// outboxRow is one outbox_events row as the checker reads it.
type outboxRow struct {
	ID           uuid.UUID
	Tag          string
	Payload      string
	CreatedAt    int64
	AvailableAt  int64
	ClaimedUntil *int64
	Attempts     int
	ProcessedAt  *int64
	FailedAt     *int64
	LastError    *string
}

func (r outboxRow) String() string {
	return fmt.Sprintf("%s %s attempts=%d processed_at=%s failed_at=%s claimed_until=%s last_error=%q payload=%s",
		r.ID, r.Tag, r.Attempts, ms(r.ProcessedAt), ms(r.FailedAt), ms(r.ClaimedUntil), deref(r.LastError), r.Payload)
}

func ms(v *int64) string {
	if v == nil {
		return "NULL"
	}
	return fmt.Sprint(*v)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// snapshot is what the invariant compares, read from both databases.
type snapshot struct {
	activeRules map[uuid.UUID]int64 // per org, from labeling_rules
	quota       map[uuid.UUID]int64 // per org, from billing_quota
	outbox      []outboxRow
	receipts    map[uuid.UUID]bool
	natsFailed  []string // billing_nats_failed: messages billing terminated
	// The second hop, read only when billing calls a provider (cluster.provider):
	// billing_outbox_events, and what the stand-in says it applied.
	billOutbox []outboxRow
	provider   *standin.Applied
	// The second consumer (cluster.ledger): its deliveries and what it applied.
	// With it, outbox holds billing's deliveries only (ledger_test.go).
	ledger *ledgerSnapshot
}

// read takes a snapshot. Labeling is read before billing, so while deliveries
// are still landing a snapshot may show a difference that the next one does not.
func (c *cluster) read(ctx context.Context) (snapshot, error) {
	s := snapshot{activeRules: map[uuid.UUID]int64{}, quota: map[uuid.UUID]int64{}, receipts: map[uuid.UUID]bool{}}
	var org uuid.UUID
	var n int64
	err := each(ctx, c.labQ, `SELECT org_id, sum(CASE WHEN active THEN 1 ELSE 0 END) FROM labeling_rules GROUP BY org_id`,
		[]any{&org, &n}, func() { s.activeRules[org] = n })
	if err != nil {
		return s, err
	}
	if s.outbox, err = readOutbox(ctx, c.labQ); err != nil {
		return s, err
	}
	if c.ledger != nil {
		if err := c.ledger.read(ctx, c.labQ, &s); err != nil {
			return s, err
		}
	}
	if err := each(ctx, c.billQ, `SELECT org_id, active_rules FROM billing_quota`, []any{&org, &n}, func() { s.quota[org] = n }); err != nil {
		return s, err
	}
	var id uuid.UUID
	if err := each(ctx, c.billQ, `SELECT event_id FROM billing_receipts`, []any{&id}, func() { s.receipts[id] = true }); err != nil {
		return s, err
	}
	var line string
	err = each(ctx, c.billQ, `SELECT 'seq ' || stream_seq || ' ' || subject || ' msg_id=' || msg_id || ': ' || reason FROM billing_nats_failed`,
		[]any{&line}, func() { s.natsFailed = append(s.natsFailed, line) })
	if err != nil || c.provider == nil {
		return s, err
	}
	// The second hop, read after billing: a row the stand-in applied was
	// appended before (in the apply that billing committed).
	if s.billOutbox, err = readOutboxTable(ctx, c.billQ, billingOutboxTable); err != nil {
		return s, err
	}
	a, err := c.provider.fetchApplied()
	if err != nil {
		return s, fmt.Errorf("the stand-in provider: %w", err)
	}
	s.provider = &a
	return s, nil
}

// each runs query on db (either dialect) and calls fn after scanning each row
// into dest.
func each(ctx context.Context, db *dbtest.DB, query string, dest []any, fn func()) error {
	if db.Pool != nil {
		rows, err := db.Pool.Query(ctx, query)
		if err != nil {
			return err
		}
		_, err = pgx.ForEachRow(rows, dest, func() error { fn(); return nil })
		return err
	}
	rows, err := db.SQLite.Read.QueryContext(ctx, query)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			return err
		}
		fn()
	}
	return rows.Err()
}

// readOutbox reads outbox_events in created_at order.
func readOutbox(ctx context.Context, db *dbtest.DB) ([]outboxRow, error) {
	return readOutboxTable(ctx, db, "outbox_events")
}

// readOutboxTable reads an outbox table (labeling's outbox_events, billing's
// billing_outbox_events: the same columns) in created_at order.
func readOutboxTable(ctx context.Context, db *dbtest.DB, table string) ([]outboxRow, error) {
	payload := "payload::text"
	if db.Pool == nil {
		payload = "payload"
	}
	var out []outboxRow
	var r outboxRow
	err := each(ctx, db, `SELECT id, event_tag, `+payload+`, created_at, available_at, claimed_until,
		attempts, processed_at, failed_at, last_error FROM `+table+` ORDER BY created_at, id`,
		[]any{&r.ID, &r.Tag, &r.Payload, &r.CreatedAt, &r.AvailableAt, &r.ClaimedUntil, &r.Attempts, &r.ProcessedAt, &r.FailedAt, &r.LastError},
		func() { out = append(out, r); r = outboxRow{} })
	return out, err
}

// problems lists, row by row, every way the snapshot breaks the invariant:
//   - per org, billing_quota.active_rules equals the org's active rules (an org
//     billing never saw counts 0);
//   - the receipts are exactly the outbox rows (none missing: nothing lost; none
//     extra: nothing applied that labeling did not produce);
//   - every outbox row is processed, none failed, none over the attempt limit;
//   - billing terminated no JetStream message (billing_nats_failed is empty).
func (s snapshot) problems(maxAttempts int) []string {
	var out []string
	for _, f := range s.natsFailed {
		out = append(out, "billing terminated a message: "+f)
	}
	orgs := map[uuid.UUID]bool{}
	for org := range s.activeRules {
		orgs[org] = true
	}
	for org := range s.quota {
		orgs[org] = true
	}
	for org := range orgs {
		if want, got := s.activeRules[org], s.quota[org]; want != got {
			out = append(out, fmt.Sprintf("org %s: %d active rules in labeling_rules, billing_quota.active_rules = %d", org, want, got))
		}
	}
	ids := map[uuid.UUID]bool{}
	for _, r := range s.outbox {
		ids[r.ID] = true
		switch {
		case r.FailedAt != nil:
			out = append(out, "outbox row failed: "+r.String())
		case r.ProcessedAt == nil:
			out = append(out, "outbox row pending: "+r.String())
		}
		if r.Attempts > maxAttempts {
			out = append(out, fmt.Sprintf("outbox row over %d attempts: %s", maxAttempts, r))
		}
		if !s.receipts[r.ID] {
			out = append(out, "no receipt for outbox row: "+r.String())
		}
	}
	for id := range s.receipts {
		if !ids[id] {
			out = append(out, fmt.Sprintf("receipt %s matches no outbox row", id))
		}
	}
	if s.provider != nil {
		out = append(out, s.secondHopProblems(maxAttempts)...)
	}
	if s.ledger != nil {
		out = append(out, s.ledgerProblems(maxAttempts)...)
	}
	sort.Strings(out)
	return out
}

// requireConverged polls until the invariant holds, failing t with the
// difference row by row at the deadline. It returns the last snapshot and how
// long convergence took, which also goes into the summary.
func (c *cluster) requireConverged(t *testing.T) (snapshot, time.Duration) {
	t.Helper()
	ctx := context.Background()
	start := time.Now()
	deadline := start.Add(convergeTimeout)
	for {
		s, err := c.read(ctx)
		var problems []string
		if err != nil {
			problems = []string{"reading the tables: " + err.Error()}
		} else {
			problems = s.problems(c.cfg.maxAttempts)
		}
		if len(problems) == 0 {
			took := time.Since(start)
			c.mu.Lock()
			c.events = len(s.outbox)
			if s.provider != nil {
				c.hop2 = s.hop2Figures(c.billing.afterClaimExits)
			}
			c.mu.Unlock()
			tally.add(func(k *counts) {
				if took > k.convergence {
					k.convergence, k.slowest = took, t.Name()
				}
			})
			t.Logf("invariant holds after %s: %d outbox rows, %d receipts, %d orgs", took.Round(time.Millisecond), len(s.outbox), len(s.receipts), len(s.activeRules))
			if s.provider != nil {
				h := c.hop2
				t.Logf("second hop holds too: %d QuotaChanged rows, each applied once by the provider (%d calls made, %d duplicates absorbed)",
					len(s.billOutbox), h.calls, h.duplicates)
			}
			if c.cfg.transport == transportNATS {
				c.requireAuditSawEvery(t, s)
			}
			return s, took
		}
		if time.Now().After(deadline) {
			if c.cfg.transport == transportNATS {
				c.logConsumer(t)
			}
			t.Fatalf("invariant does not hold after %s (%d problems):\n%s", convergeTimeout, len(problems), strings.Join(problems, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// outboxRows reads outbox_events now.
func (c *cluster) outboxRows(t *testing.T) []outboxRow {
	t.Helper()
	out, err := readOutbox(context.Background(), c.labQ)
	if err != nil {
		t.Fatalf("read outbox_events: %v", err)
	}
	return out
}

// receiptCount counts billing_receipts now.
func (c *cluster) receiptCount(t *testing.T) int {
	t.Helper()
	var n int
	if err := c.billQ.QueryRow(`SELECT count(*) FROM billing_receipts`).Scan(&n); err != nil {
		t.Fatalf("count billing_receipts: %v", err)
	}
	return n
}

// ruleActive reads a rule's active flag from labeling_rules.
func (c *cluster) ruleActive(t *testing.T, id uuid.UUID) bool {
	t.Helper()
	var active bool
	if err := c.labQ.QueryRow(`SELECT active FROM labeling_rules WHERE id = $1`, id).Scan(&active); err != nil {
		t.Fatalf("read rule %s: %v", id, err)
	}
	return active
}

// --- the second hop: billing's outbox and the provider ---

// billingOutboxTable is billing's outbox (contract section 2).
const billingOutboxTable = "billing_outbox_events"

// quotaChanged is the payload of a billing_outbox_events row.
type quotaChanged struct {
	OrgID         *uuid.UUID `json:"orgId"`
	ActiveRules   *int64     `json:"activeRules"`
	SourceEventID *uuid.UUID `json:"sourceEventId"`
	Version       *int64     `json:"version"`
}

// hop2Figures are one scenario's second-hop figures for the summary.
type hop2Figures struct {
	calls      int // calls billing's relay made: claims of its rows past the after-claim point
	applied    int // changes the provider applied
	duplicates int // calls the provider absorbed (their key applied before)
}

// hop2Figures reads the figures off a converged snapshot. Every claim of a row
// is one attempt (the claim increments attempts); a claim that died at the
// after-claim point made no call, every other one did.
func (s snapshot) hop2Figures(afterClaimExits int) hop2Figures {
	attempts := 0
	for _, r := range s.billOutbox {
		attempts += r.Attempts
	}
	return hop2Figures{calls: attempts - afterClaimExits, applied: int(s.provider.Applied), duplicates: int(s.provider.Duplicates)}
}

// secondHopProblems lists, row by row, every way the snapshot breaks the
// second hop's invariant:
//   - every billing_outbox_events row is a QuotaChanged, processed (the provider
//     answered 2xx), none failed, none over the attempt limit;
//   - every event billing applied (a receipt) has exactly one QuotaChanged row
//     (none lost: the append is in the apply's transaction; none doubled by a
//     redelivery), and no row comes from an event billing has no receipt for;
//   - per org, the rows' versions are 1..N, none missing or repeated, and each
//     row's activeRules is the org's count right after its event: the running
//     sum of the events' deltas (+1 RuleActivated, -1 RuleDeactivated) in
//     version order; the highest version's count is billing's quota;
//   - the provider applied exactly as many changes as there are rows: with every
//     row answered 2xx, each row's key was applied once, and no other key was;
//   - per org, the provider's count equals labeling's active rules (and so
//     billing's quota, which the first hop checks), and the version it holds
//     is the org's highest.
func (s snapshot) secondHopProblems(maxAttempts int) []string {
	var out []string
	p := s.provider
	delta := map[uuid.UUID]int64{}
	for _, r := range s.outbox {
		switch r.Tag {
		case "RuleActivated":
			delta[r.ID] = 1
		case "RuleDeactivated":
			delta[r.ID] = -1
		}
	}
	rowsOf := map[uuid.UUID]int{} // QuotaChanged rows per source event
	type change struct {
		version, activeRules, delta int64
		row                         outboxRow
	}
	changes := map[uuid.UUID][]change{} // per org
	for _, r := range s.billOutbox {
		switch {
		case r.FailedAt != nil:
			out = append(out, "billing outbox row failed: "+r.String())
		case r.ProcessedAt == nil:
			out = append(out, "billing outbox row pending (no 2xx from the provider yet): "+r.String())
		}
		if r.Attempts > maxAttempts {
			out = append(out, fmt.Sprintf("billing outbox row over %d attempts: %s", maxAttempts, r))
		}
		var q quotaChanged
		if r.Tag != "QuotaChanged" || json.Unmarshal([]byte(r.Payload), &q) != nil || q.OrgID == nil || q.ActiveRules == nil ||
			q.SourceEventID == nil || q.Version == nil {
			out = append(out, "billing outbox row is no QuotaChanged {orgId, activeRules, sourceEventId, version}: "+r.String())
			continue
		}
		rowsOf[*q.SourceEventID]++
		d, ok := delta[*q.SourceEventID]
		if !ok {
			out = append(out, "billing outbox row from no event of labeling's outbox: "+r.String())
			continue
		}
		changes[*q.OrgID] = append(changes[*q.OrgID], change{version: *q.Version, activeRules: *q.ActiveRules, delta: d, row: r})
	}
	for org, cs := range changes {
		slices.SortFunc(cs, func(a, b change) int { return cmp.Compare(a.version, b.version) })
		running := int64(0)
		for i, c := range cs {
			if c.version != int64(i+1) {
				out = append(out, fmt.Sprintf("org %s: QuotaChanged row %d in version order has version %d, want %d (none missing or repeated): %s",
					org, i+1, c.version, i+1, c.row))
			}
			running += c.delta
			if c.activeRules != running {
				out = append(out, fmt.Sprintf("billing outbox row says activeRules=%d, the org's count after its events in version order is %d: %s",
					c.activeRules, running, c.row))
			}
		}
		if last := cs[len(cs)-1]; last.activeRules != s.quota[org] {
			out = append(out, fmt.Sprintf("org %s: its highest version %d says activeRules=%d, billing_quota.active_rules = %d",
				org, last.version, last.activeRules, s.quota[org]))
		}
		if got := p.Versions[org.String()]; got != int64(len(cs)) {
			out = append(out, fmt.Sprintf("org %s: the provider holds version %d, the highest is %d", org, got, len(cs)))
		}
	}
	for id := range s.receipts {
		if n := rowsOf[id]; n != 1 {
			out = append(out, fmt.Sprintf("event %s applied by billing has %d QuotaChanged rows, want 1", id, n))
		}
	}
	for id, n := range rowsOf {
		if !s.receipts[id] {
			out = append(out, fmt.Sprintf("%d QuotaChanged rows from event %s, which billing has no receipt for", n, id))
		}
	}
	if p.Applied != int64(len(s.billOutbox)) {
		out = append(out, fmt.Sprintf("the provider applied %d changes, billing's outbox holds %d QuotaChanged rows", p.Applied, len(s.billOutbox)))
	}
	if p.Rejected > 0 {
		out = append(out, fmt.Sprintf("the provider refused %d calls for their signature", p.Rejected))
	}
	orgs := map[uuid.UUID]bool{}
	for org := range s.activeRules {
		orgs[org] = true
	}
	byOrg := map[uuid.UUID]int64{}
	for key, n := range p.ByOrg {
		org, err := uuid.Parse(key)
		if err != nil {
			out = append(out, fmt.Sprintf("the provider counts an org %q that is no UUID", key))
			continue
		}
		byOrg[org] = n
		orgs[org] = true
	}
	for org := range orgs {
		if want, got := s.activeRules[org], byOrg[org]; want != got {
			out = append(out, fmt.Sprintf("org %s: %d active rules in labeling_rules, the provider counts %d", org, want, got))
		}
	}
	return out
}

// billingOutboxRows reads billing_outbox_events now.
func (c *cluster) billingOutboxRows(t *testing.T) []outboxRow {
	t.Helper()
	out, err := readOutboxTable(context.Background(), c.billQ, billingOutboxTable)
	require.NoError(t, err, "read %s", billingOutboxTable)
	return out
}

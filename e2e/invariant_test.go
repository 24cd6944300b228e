package e2e

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

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
	return s, err
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
	payload := "payload::text"
	if db.Pool == nil {
		payload = "payload"
	}
	var out []outboxRow
	var r outboxRow
	err := each(ctx, db, `SELECT id, event_tag, `+payload+`, created_at, available_at, claimed_until,
		attempts, processed_at, failed_at, last_error FROM outbox_events ORDER BY created_at, id`,
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
			c.mu.Unlock()
			tally.add(func(k *counts) {
				if took > k.convergence {
					k.convergence, k.slowest = took, t.Name()
				}
			})
			t.Logf("invariant holds after %s: %d outbox rows, %d receipts, %d orgs", took.Round(time.Millisecond), len(s.outbox), len(s.receipts), len(s.activeRules))
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

package e2e

// The second consumer (issue 33): the example consumer example/ledger, built
// with -tags failpoints by TestMain and run as a real process beside billing, subscribed
// to RuleActivated only. Over HTTP labeling delivers each RuleActivated to it
// as a subscriber of its own (SUBSCRIBERS, its own URL and token: one row per
// delivery in outbox_events); over NATS its durable filters the stream on
// labeling.events.RuleActivated (NATS_CONSUMERS, NATS_CONSUMER_LEDGER_TYPES).
// The invariant (requireConverged) then covers it too: every event applied
// exactly once by each subscriber of its type, and by no other. The scenarios
// are in fanout_test.go.

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	labelingconfig "github.com/acme/outboxpair/cmd/labeling/config"
	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
)

const (
	// ledgerName names the second consumer everywhere: its subscriber name in
	// labeling's SUBSCRIBERS, its durable in NATS_CONSUMERS, its metrics.
	ledgerName = ledger.Name
	// ledgerToken is its events token over HTTP, distinct from billing's: a
	// subscriber cannot forge deliveries to another.
	ledgerToken = "e2e-ledger-token"
	// ledgerType is the only type the ledger subscribes to.
	ledgerType = ledger.EventType
)

// ledgerConfig is a cluster's second consumer (config.ledger).
type ledgerConfig struct {
	failpoints string // FAILPOINTS of its first start
}

// ledgerSide is the running second consumer of a cluster: its process and
// its database, read by the invariant.
type ledgerSide struct {
	t     *testing.T
	tr    string
	proc  *proc
	db    *dbtest.DB
	kills int // SIGKILLs of it and failpoint exits, for the summary

	mu      sync.Mutex
	applied int // events it applied, at the last convergence
}

// startLedger starts cfg.ledger, if any, on a database of its own (migrated
// by the ledger at its start, as an adopter's binary does) and returns the
// variables that make labeling deliver RuleActivated to it. natsEnv is
// labeling's NATS settings (empty over HTTP).
func (c *cluster) startLedger(t *testing.T, natsEnv map[string]string) map[string]string {
	t.Helper()
	if c.cfg.ledger == nil {
		return nil
	}
	var db *dbtest.DB
	if c.cfg.dialect == sqldb.SQLite {
		db = dbtest.OpenSQLite(t, "sqlite:"+filepath.Join(t.TempDir(), "ledger.db"))
	} else {
		pg := pgtest.Empty(t)
		db = &dbtest.DB{DB: postgres.NewDB(pg.Pool), URL: pg.URL, Pool: pg.Pool}
	}
	env := map[string]string{
		"DATABASE_URL": appURL(t, db.URL, "e2e-ledger"),
		"EVENTS_TOKEN": ledgerToken,
	}
	labEnv := map[string]string{}
	if c.cfg.transport == transportNATS {
		env["NATS_URL"] = natsEnv["NATS_URL"]
		env["NATS_ACK_WAIT"] = "2s"
		env["NATS_DURABLE"] = ledger.Durable
		// Over NATS the token is the stream's signing key (labeling signs each
		// message with its EVENTS_TOKEN): every consumer of the stream holds
		// the same one. Its own token is HTTP's (SUBSCRIBER_<NAME>_TOKEN).
		env["EVENTS_TOKEN"] = eventsToken
		labEnv["NATS_CONSUMERS"] = natsEnv["NATS_CONSUMERS"] + "," + ledger.Durable
		labEnv[labelingconfig.ConsumerTypesVar(ledger.Durable)] = ledgerType
	}
	maps.Copy(env, c.cfg.env)
	p := newProc(t, ledgerName, ledgerBin, env)
	p.consumer = ledgerName
	c.ledger = &ledgerSide{t: t, tr: c.cfg.transport, proc: p, db: db}
	t.Cleanup(c.ledger.teardown) // after every life's harvest: registered before its starts
	p.launch(t, c.cfg.ledger.failpoints)
	if c.cfg.transport == transportHTTP {
		labEnv["SUBSCRIBERS"] = ledgerName
		labEnv[labelingconfig.SubscriberVar(ledgerName, "URL")] = p.url()
		labEnv[labelingconfig.SubscriberVar(ledgerName, "TOKEN")] = ledgerToken
		labEnv[labelingconfig.SubscriberVar(ledgerName, "TYPES")] = ledgerType
	}
	return labEnv
}

// kill is a SIGKILL of the ledger, counted as its kill.
func (l *ledgerSide) kill() {
	l.proc.kill()
	l.kills++
}

// requireDiedAt is proc.requireDiedAt, counted as the ledger's kill.
func (l *ledgerSide) requireDiedAt(t *testing.T, point string) {
	t.Helper()
	l.proc.requireDiedAt(t, point)
	l.kills++
}

// teardown adds the ledger's figures to the summary.
func (l *ledgerSide) teardown() {
	l.mu.Lock()
	applied := l.applied
	l.mu.Unlock()
	l.t.Logf("e2e: ledger: %d events applied, %d duplicates absorbed by its receipts, %d kills", applied, l.proc.duplicates, l.kills)
	ledgerTally.add(func(s *ledgerCounts) {
		s.scenarios++
		s.kills += l.kills
		s.applied += applied
		s.duplicates += l.proc.duplicates
	})
}

// fanRow is a row of outbox_events with its delivery's subscriber (” for
// billing) and the id of the event it delivers (the row's own for billing's).
type fanRow struct {
	outboxRow
	Subscriber string
	EventID    uuid.UUID
}

// ledgerSnapshot is the second consumer's part of a snapshot.
type ledgerSnapshot struct {
	tr         string
	deliveries []fanRow            // labeling's rows for the ledger (HTTP); none over NATS
	others     []fanRow            // rows for a subscriber nobody configured
	receipts   map[uuid.UUID]int64 // ledger_receipts: event id → created_at (ms)
	entries    map[uuid.UUID]int   // ledger_entries rows per event id
	natsFailed []string            // ledger_nats_failed
}

// read fills s.ledger, and leaves in s.outbox billing's deliveries only: with
// a second subscriber, outbox_events holds a row per delivery.
func (l *ledgerSide) read(ctx context.Context, lab *dbtest.DB, s *snapshot) error {
	ls := &ledgerSnapshot{tr: l.tr, receipts: map[uuid.UUID]int64{}, entries: map[uuid.UUID]int{}}
	payload := "payload::text"
	if lab.Pool == nil {
		payload = "payload"
	}
	var billing []outboxRow
	var r fanRow
	err := each(ctx, lab, `SELECT id, subscriber, COALESCE(event_id, id), event_tag, `+payload+`, created_at, available_at,
		claimed_until, attempts, processed_at, failed_at, last_error FROM outbox_events ORDER BY created_at, id`,
		[]any{&r.ID, &r.Subscriber, &r.EventID, &r.Tag, &r.Payload, &r.CreatedAt, &r.AvailableAt, &r.ClaimedUntil,
			&r.Attempts, &r.ProcessedAt, &r.FailedAt, &r.LastError},
		func() {
			switch r.Subscriber {
			case "":
				billing = append(billing, r.outboxRow)
			case ledgerName:
				ls.deliveries = append(ls.deliveries, r)
			default:
				ls.others = append(ls.others, r)
			}
			r = fanRow{}
		})
	if err != nil {
		return err
	}
	var id uuid.UUID
	var at int64
	if err := each(ctx, l.db, `SELECT event_id, created_at FROM `+ledger.Receipts, []any{&id, &at}, func() { ls.receipts[id] = at }); err != nil {
		return err
	}
	if err := each(ctx, l.db, `SELECT event_id FROM ledger_entries`, []any{&id}, func() { ls.entries[id]++ }); err != nil {
		return err
	}
	var line string
	err = each(ctx, l.db, `SELECT 'seq ' || stream_seq || ' ' || subject || ' msg_id=' || msg_id || ': ' || reason FROM `+ledger.NATSFailed,
		[]any{&line}, func() { ls.natsFailed = append(ls.natsFailed, line) })
	if err != nil {
		return err
	}
	s.outbox, s.ledger = billing, ls
	return nil
}

// ledgerProblems lists every way the snapshot breaks the second consumer's
// part of the invariant:
//   - every RuleActivated event (billing's rows are the events) has exactly
//     one ledger receipt and one ledger entry: applied once;
//   - the ledger has no receipt of an event of another type (none by others),
//     nor of an event labeling never produced;
//   - over HTTP each RuleActivated has exactly one delivery row for the
//     ledger, processed, not failed, within the attempt limit, and no other
//     type has one; over NATS there is no row but billing's;
//   - the ledger terminated no stream message (ledger_nats_failed is empty).
func (s snapshot) ledgerProblems(maxAttempts int) []string {
	ls := s.ledger
	var out []string
	for _, f := range ls.natsFailed {
		out = append(out, "the ledger terminated a message: "+f)
	}
	for _, r := range ls.others {
		out = append(out, fmt.Sprintf("outbox row for subscriber %q, which nobody configured: %s", r.Subscriber, r))
	}
	tags := map[uuid.UUID]string{}
	for _, r := range s.outbox {
		tags[r.ID] = r.Tag
		if r.Tag != ledgerType {
			continue
		}
		if _, ok := ls.receipts[r.ID]; !ok {
			out = append(out, "no ledger receipt for RuleActivated event: "+r.String())
		}
		if n := ls.entries[r.ID]; n != 1 {
			out = append(out, fmt.Sprintf("RuleActivated event has %d ledger entries, want 1: %s", n, r))
		}
	}
	for id := range ls.receipts {
		switch tag, ok := tags[id]; {
		case !ok:
			out = append(out, fmt.Sprintf("ledger receipt %s matches no event", id))
		case tag != ledgerType:
			out = append(out, fmt.Sprintf("the ledger applied event %s of type %s, which it does not subscribe to", id, tag))
		}
	}
	for id, n := range ls.entries {
		if _, ok := ls.receipts[id]; !ok {
			out = append(out, fmt.Sprintf("%d ledger entries for event %s, which has no ledger receipt", n, id))
		}
	}
	if ls.tr == transportNATS {
		for _, r := range ls.deliveries {
			out = append(out, "a delivery row for the ledger over NATS (its durable reads the stream): "+r.String())
		}
		return out
	}
	rows := map[uuid.UUID]int{}
	for _, r := range ls.deliveries {
		rows[r.EventID]++
		switch {
		case r.FailedAt != nil:
			out = append(out, "ledger delivery failed: "+r.String())
		case r.ProcessedAt == nil:
			out = append(out, "ledger delivery pending: "+r.String())
		}
		if r.Attempts > maxAttempts {
			out = append(out, fmt.Sprintf("ledger delivery over %d attempts: %s", maxAttempts, r))
		}
		switch tag, ok := tags[r.EventID]; {
		case !ok:
			out = append(out, fmt.Sprintf("ledger delivery of event %s, which has no row of billing's: %s", r.EventID, r))
		case tag != ledgerType || r.Tag != ledgerType:
			out = append(out, fmt.Sprintf("ledger delivery of a %s event (it subscribes to %s only): %s", tag, ledgerType, r))
		}
	}
	for _, r := range s.outbox {
		if r.Tag == ledgerType && rows[r.ID] != 1 {
			out = append(out, fmt.Sprintf("RuleActivated event has %d delivery rows for the ledger, want 1: %s", rows[r.ID], r))
		}
	}
	return out
}

// requireLedgerConverged is requireConverged with the ledger's figures kept
// for the summary and its own checks of "none by others" beyond its tables:
// the running ledger answered no delivery of a type it has no handler for,
// and over NATS its durable filters RuleActivated and holds nothing
// unacknowledged.
func (c *cluster) requireLedgerConverged(t *testing.T) snapshot {
	t.Helper()
	s, _ := c.requireConverged(t)
	require.NotNil(t, s.ledger, "a cluster with the ledger")
	c.ledger.mu.Lock()
	c.ledger.applied = len(s.ledger.receipts)
	c.ledger.mu.Unlock()
	activated := 0
	for _, r := range s.outbox {
		if r.Tag == ledgerType {
			activated++
		}
	}
	t.Logf("the ledger holds too: %d of %d events were RuleActivated, each applied once by it (%d delivery rows), %d duplicates absorbed",
		activated, len(s.outbox), len(s.ledger.deliveries), c.ledger.proc.duplicatesSoFar(t))
	if c.ledger.proc.alive() {
		outcomes, err := c.ledger.proc.counter(ledgerName+"_events_total", "outcome")
		require.NoError(t, err)
		require.Zero(t, outcomes["unknown_type"], "the ledger was given no event of a type it does not handle: %v", outcomes)
	}
	if c.cfg.transport == transportNATS {
		c.requireLedgerDurable(t)
	}
	return s
}

// requireLedgerDurable checks the ledger's durable on the broker: it filters
// labeling.events.RuleActivated only, and once the ledger has applied every
// RuleActivated it holds nothing pending or unacknowledged (a durable that
// took other types would redeliver them, naked, until its limit).
func (c *cluster) requireLedgerDurable(t *testing.T) {
	t.Helper()
	js := natsClient(t, c.nats)
	var info *jetstream.ConsumerInfo
	waitFor(t, convergeTimeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cons, err := js.Consumer(ctx, stream.Name, ledger.Durable)
		if err != nil {
			return false
		}
		if info, err = cons.Info(ctx); err != nil {
			return false
		}
		return info.NumPending == 0 && info.NumAckPending == 0
	}, "the ledger's durable holds nothing pending or unacknowledged: %+v", info)
	filters := info.Config.FilterSubjects
	if info.Config.FilterSubject != "" {
		filters = append(filters, info.Config.FilterSubject)
	}
	require.Equal(t, []string{stream.Subject(ledgerType)}, filters, "the ledger's durable takes RuleActivated only")
}

// ledgerTally sums the second consumer's figures, for the summary.
var ledgerTally = &ledgerCounts{}

type ledgerCounts struct {
	mu         sync.Mutex
	scenarios  int
	kills      int // of the ledger: SIGKILLs and failpoint exits (also in the suite's kills)
	applied    int // events the ledger applied
	duplicates int // deliveries its receipts absorbed (ledger_events_total{outcome="already_applied"})
	// billing's p99 latency with the ledger up and down, per dialect/transport
	latencies []string
}

func (c *ledgerCounts) add(f func(c *ledgerCounts)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

// line is the summary's line for the second consumer.
func (c *ledgerCounts) line() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := fmt.Sprintf("second consumer (ledger, RuleActivated only): %d scenarios; %d kills of it; %d events applied by it, %d duplicates absorbed by its receipts\n",
		c.scenarios, c.kills, c.applied, c.duplicates)
	sort.Strings(c.latencies)
	for _, l := range c.latencies {
		s += "  " + l + "\n"
	}
	return s
}

// --- billing's latency with the ledger up and down ---

// latency is a set of delivery latencies: an event's outbox created_at to its
// receipt's created_at (the apply's clock), in ms.
type latency []int64

// billingLatencies reads the latency of every billing event created in
// [from, to) that billing has applied.
func (c *cluster) billingLatencies(t *testing.T, from, to time.Time) latency {
	t.Helper()
	ctx := context.Background()
	applied := map[uuid.UUID]int64{}
	var id uuid.UUID
	var at int64
	require.NoError(t, each(ctx, c.billQ, `SELECT event_id, created_at FROM billing_receipts`, []any{&id, &at}, func() { applied[id] = at }))
	s, err := c.read(ctx)
	require.NoError(t, err)
	var out latency
	for _, r := range s.outbox {
		if r.CreatedAt < from.UnixMilli() || r.CreatedAt >= to.UnixMilli() {
			continue
		}
		if a, ok := applied[r.ID]; ok {
			out = append(out, a-r.CreatedAt)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// quantile is the q-quantile (nearest rank) in ms; 0 when empty.
func (l latency) quantile(q float64) time.Duration {
	if len(l) == 0 {
		return 0
	}
	i := int(q*float64(len(l))+0.999999) - 1
	i = max(0, min(i, len(l)-1))
	return time.Duration(l[i]) * time.Millisecond
}

func (l latency) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d events, p50 %s, p99 %s, max %s", len(l), l.quantile(0.5), l.quantile(0.99), l.quantile(1))
	return b.String()
}

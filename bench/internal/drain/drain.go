// Package drain times drains, every one the same way, for every system, by the
// database's clock, and runs the project's own drain in process:
//
//   - The system is started first, on an empty table (the pair over HTTP or
//     NATS has answered /readyz), and warmed up (WarmUp) until an item
//     committed with its wake-up is done at once, so no start-up is in the
//     figure.
//   - The backlog is committed in one transaction (db.CommitBacklog), with the
//     wake-up a producer sends (the relay's pg_notify, River's insert
//     notification), and with ANALYZE inside it for an "analyzed" drain:
//     ANALYZE counts the rows of its own transaction, so the statistics describe
//     the backlog and commit with it. The drain's clock starts at the
//     clock_timestamp() read last in that transaction: the first row is
//     available at the commit right after it.
//   - The clock stops at the last effect, as the system recorded it in the row:
//     for a no-op drain the time the last row's work ended (the relay's
//     processed_at, River's finalized_at: both the worker's clock, before the
//     batched settle or completer flush, so neither system's flush tail is in
//     the figure); for a consumer drain the clock_timestamp() that
//     billing_receipts.bench_at takes in the consumer's own transaction.
//   - Completion is polled (every 20ms, less often as a drain goes on: see
//     Probe.Wait) with probes that stay on an index (pendingProbe,
//     riverPendingProbe): the probes decide when to read the end stamps, they
//     are not the clock.
package drain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acme/outboxpair/bench/internal/db"
	"github.com/acme/outboxpair/bench/internal/sitting"
)

// pendingProbe returns a row while any outbox row is pending: the lowest
// pending created_at, as text, the key pendingFrom starts the next probe from.
// ORDER BY the pending index's key keeps it on outbox_events_pending_idx
// analyzed or not; an EXISTS would be planned for its first row and, once
// ANALYZE says the table is all backlog, become a sequential scan through the
// settled rows at its front. The column is named key so that ORDER BY
// created_at is the bigint's order, not its text's.
const pendingProbe = `SELECT created_at::text AS key FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL ORDER BY created_at LIMIT 1`

// pendingFrom is pendingProbe from key (a created_at it returned) on. The
// lowest pending created_at only rises during a drain (a row keeps its
// created_at through claims, retries and settles, and nothing is appended
// below it), so nothing pending lies below the key. Without it every probe
// read the index from the bottom, through the dead entries of every row
// settled so far: at 1M rows, 600ms a probe on this busy machine, a core taken
// from the drain it timed and growing with the backlog.
func pendingFrom(key string) string {
	return `SELECT created_at::text AS key FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL AND created_at >= ` +
		key + `::bigint ORDER BY created_at LIMIT 1`
}

// riverPendingProbe returns a row while any River job is not finalized: one
// probe per unfinished state, each ordered by river_job_prioritized_fetching_index
// (state, queue, priority, scheduled_at, id) so that it stays on that index,
// and of those the lowest (queue, priority, scheduled_at, id), as an SQL row
// literal, the key riverPendingFrom starts the next probe from.
var riverPendingProbe = riverPendingFrom("")

// riverPendingFrom is riverPendingProbe from key on ("": from the start). A
// job keeps its (queue, priority, scheduled_at) from available through running
// to completed, and a retry or snooze only moves its scheduled_at later, so the
// lowest key among unfinished jobs only rises during a drain, as the outbox's
// does (pendingFrom).
func riverPendingFrom(key string) string {
	from := ""
	if key != "" {
		from = " AND (queue, priority, scheduled_at, id) >= " + key
	}
	q := "SELECT format('(%L::text, %s::smallint, %L::timestamptz, %s::bigint)', queue, priority, scheduled_at, id) FROM ("
	for i, s := range []string{"available", "running", "retryable", "scheduled", "pending"} {
		if i > 0 {
			q += "\nUNION ALL "
		}
		q += "(SELECT queue, priority, scheduled_at, id FROM river_job WHERE state = '" + s + "'" + from + " ORDER BY queue, priority, scheduled_at, id LIMIT 1)"
	}
	return q + "\n) unfinished ORDER BY queue, priority, scheduled_at, id LIMIT 1"
}

const (
	pendingCountSQL      = `SELECT count(*) FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL`
	riverPendingCountSQL = `SELECT count(*) FROM river_job WHERE finalized_at IS NULL`
	receiptsCountSQL     = `SELECT count(*) FROM billing_receipts`

	// The end stamps (see the package comment).
	noopEndSQL     = `SELECT to_timestamp(max(processed_at) / 1000.0) FROM outbox_events`
	riverEndSQL    = `SELECT max(finalized_at) FROM river_job`
	receiptsEndSQL = `SELECT max(bench_at) FROM billing_receipts`
)

// Probes are the statements that tell a drain is done and when it ended, in
// one dialect.
type Probes struct {
	Pending, PendingCount           string                  // outbox
	PendingFrom, RiverPendingFrom   func(key string) string // nil: none (Probe.From)
	NoopEnd                         string                  // the relay's last processed_at
	RiverPending, RiverPendingCount string                  // River's jobs
	RiverEnd                        string                  // River's last finalized_at
	ReceiptsEnd, ReceiptsCount      string                  // billing's receipts
}

var pgProbes = Probes{
	Pending:           pendingProbe,
	PendingFrom:       pendingFrom,
	RiverPendingFrom:  riverPendingFrom,
	PendingCount:      pendingCountSQL,
	NoopEnd:           noopEndSQL,
	RiverPending:      riverPendingProbe,
	RiverPendingCount: riverPendingCountSQL,
	RiverEnd:          riverEndSQL,
	ReceiptsEnd:       receiptsEndSQL,
	ReceiptsCount:     receiptsCountSQL,
}

// ProbesOf are the probes in s's dialect.
func ProbesOf(s *sitting.Sitting) Probes {
	if s.Opt.SQLite {
		return liteProbes
	}
	return pgProbes
}

// Probe is how a drain knows it is done and when it ended.
type Probe struct {
	Q     db.Querier // where the probe and the count run
	Probe string     // a row while work is pending
	// From, when set, is the probe from a key the last probe returned (its
	// first column, as text) on: the probe then reads from where work still
	// was, not from the bottom of the index.
	From      func(key string) string
	key       string
	CountLeft string // rows left, read only when the drain is cut off
	// Effects, when set, must hold n rows before the drain is done (the NATS
	// consumer applies after the relay settled): counted only once the probe
	// found nothing pending.
	Effects    db.Querier
	EffectsSQL string     // counts the effects on Effects
	Warmed     int        // receipts the warm-up left, counted by EffectsSQL too
	EndDB      db.Querier // where EndSQL runs
	EndSQL     string     // the last effect's stamp
}

// Wait polls until the drain is done, ctx ends, or limit passes (an error
// Rate takes as a cut-off drain, with the rows left and the database's clock
// as the end).
//
// The probe runs every 20ms at first and every fiftieth of the time waited so
// far later on (500ms at most): the end is the rows' stamp, not the probe's
// time, so a later probe changes no figure, while a probe every 20ms through a
// long drain's pending index (the dead entries of every row settled so far,
// unvacuumed) took a core of this 2-core machine from the drain it timed.
func (p *Probe) Wait(ctx context.Context, n int, limit time.Duration) (end time.Time, left int64, err error) {
	began := time.Now()
	deadline := began.Add(limit)
	for {
		done, err := p.done(ctx, n)
		if err != nil {
			return time.Time{}, 0, err
		}
		if done {
			end, err := StampOf(ctx, p.EndDB, p.EndSQL)()
			if err != nil {
				return time.Time{}, 0, fmt.Errorf("end stamp: %w", err)
			}
			return end, 0, nil
		}
		if time.Now().After(deadline) {
			if p.Effects != nil {
				var got int64
				if err := p.Effects.One(ctx, p.EffectsSQL, &got); err != nil {
					return time.Time{}, 0, err
				}
				left = int64(n+p.Warmed) - got
			} else if err := p.Q.One(ctx, p.CountLeft, &left); err != nil {
				return time.Time{}, 0, err
			}
			if end, err = p.Q.Clock(ctx); err != nil {
				return time.Time{}, 0, err
			}
			return end, max(left, 1), errLimit
		}
		select {
		case <-ctx.Done():
			return time.Time{}, 0, ctx.Err()
		case <-time.After(probeEvery(time.Since(began))):
		}
	}
}

// probeEvery is the wait before the next probe of a drain waited on for so far.
func probeEvery(waited time.Duration) time.Duration {
	return min(max(waited/50, 20*time.Millisecond), 500*time.Millisecond)
}

func (p *Probe) done(ctx context.Context, n int) (bool, error) {
	pending, err := p.nothingPending(ctx)
	switch {
	case err != nil:
		return false, fmt.Errorf("probe: %w", err)
	case !pending:
		return false, nil
	case p.Effects == nil:
		return true, nil
	}
	var got int64
	if err := p.Effects.One(ctx, p.EffectsSQL, &got); err != nil {
		return false, err
	}
	return got >= int64(n+p.Warmed), nil
}

// nothingPending runs the probe (from the last key on, with From).
func (p *Probe) nothingPending(ctx context.Context) (bool, error) {
	if p.From == nil {
		return NoRow(ctx, p.Q, p.Probe)()
	}
	query := p.Probe
	if p.key != "" {
		query = p.From(p.key)
	}
	var key string
	err := p.Q.One(ctx, query, &key)
	if errors.Is(err, db.ErrNoRow) {
		return true, nil
	}
	if err == nil {
		p.key = key
	}
	return false, err
}

// WarmUp makes sure the system's wake-up path works before the clock starts:
// a system's LISTEN connection opens after it starts, and a backlog committed
// before it listens would wait for the next poll (1s for the relay and River
// alike), a second that has nothing to do with either's speed. It commits one
// item at a time (commit, which returns the commit's stamp) until one is done
// (done) with its effect stamped (end) within warmFast of its commit, which
// only a notification makes likely, and returns how many it committed. The
// items also warm the pools and connections the drain then uses.
func WarmUp(ctx context.Context, commit func() (time.Time, error), done func() (bool, error), end func() (time.Time, error)) (int, error) {
	for i := 1; i <= warmTries; i++ {
		start, err := commit()
		if err != nil {
			return i - 1, fmt.Errorf("warm-up: %w", err)
		}
		deadline := time.Now().Add(warmWait)
		for {
			ok, err := done()
			if err != nil {
				return i, fmt.Errorf("warm-up: %w", err)
			}
			if ok {
				break
			}
			if time.Now().After(deadline) {
				return i, fmt.Errorf("warm-up: item %d not done within %s", i, warmWait)
			}
			select {
			case <-ctx.Done():
				return i, ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		stamped, err := end()
		if err != nil {
			return i, fmt.Errorf("warm-up: %w", err)
		}
		if stamped.Sub(start) < warmFast {
			return i, nil
		}
	}
	return warmTries, fmt.Errorf("warm-up: no item of %d took effect within %s of its commit: is the system's wake-up (LISTEN/NOTIFY) off?", warmTries, warmFast)
}

// StampOf is end() for WarmUp: the end stamp query's value on q (an error
// when no effect is stamped yet).
func StampOf(ctx context.Context, q db.Querier, endSQL string) func() (time.Time, error) {
	return func() (time.Time, error) {
		at, err := q.At(ctx, endSQL)
		if err != nil {
			return time.Time{}, err
		}
		if at == nil {
			return time.Time{}, errors.New("no effect stamped")
		}
		return *at, nil
	}
}

const (
	warmTries = 20
	warmWait  = 10 * time.Second
	// warmFast is well under the 1s poll interval of both systems and above
	// River's default FetchCooldown (100ms), commit to effect by the stamps.
	warmFast = 150 * time.Millisecond
)

// NoRow is done() for a probe: true when the probe returns no row on q.
func NoRow(ctx context.Context, q db.Querier, probe string) func() (bool, error) {
	return func() (bool, error) {
		var row any
		err := q.One(ctx, probe, &row)
		if errors.Is(err, db.ErrNoRow) {
			return true, nil
		}
		return false, err
	}
}

// CountAtLeast is done() for the NATS pair: billing (on q) holds at least *n
// receipts.
func CountAtLeast(ctx context.Context, q db.Querier, n *int) func() (bool, error) {
	return func() (bool, error) {
		var got int
		err := q.One(ctx, receiptsCountSQL, &got)
		return got >= *n, err
	}
}

package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Every drain is timed the same way, for every system, by the database's clock:
//
//   - The system is started first, on an empty table (the pair over HTTP or
//     NATS has answered /readyz), and warmed up (warmUp) until an item
//     committed with its wake-up is done at once, so no start-up is in the
//     figure.
//   - The backlog is committed in one transaction (commitBacklog), with the
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
//     wait) with probes that stay on an index (pendingProbe,
//     riverPendingProbe): the probes decide when to read the end stamps, they
//     are not the clock.

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

	// The end stamps (see above).
	noopEndSQL     = `SELECT to_timestamp(max(processed_at) / 1000.0) FROM outbox_events`
	riverEndSQL    = `SELECT max(finalized_at) FROM river_job`
	receiptsEndSQL = `SELECT max(bench_at) FROM billing_receipts`

	// stampReceiptsColumn gives billing_receipts the consumer's commit-side
	// stamp: a default, so billing's own INSERT (which names its columns) fills
	// it in its own transaction, at no extra statement or row.
	stampReceiptsColumn = `ALTER TABLE billing_receipts ADD COLUMN bench_at timestamptz NOT NULL DEFAULT clock_timestamp()`

	// notifyRequeued is the wake-up a requeue sends (infra/outbox admin.go,
	// listen.go) to the relays that LISTEN (Config.Notify, OUTBOX_NOTIFY): its
	// payload, "requeued:" and the lowest created_at made claimable, also
	// drops their scan floor to it. (An append's Nudge sends an empty one.)
	notifyRequeued = `SELECT pg_notify('outbox_events', $1)`
)

// commitBacklog runs fill in one transaction, then (if analyzeTable is set)
// ANALYZE in it, reads the server's clock_timestamp() and commits. The clock
// reading is the drain's start.
func commitBacklog(ctx context.Context, pool *pgxpool.Pool, analyzeTable string, fill func(pgx.Tx) error) (time.Time, error) {
	var start time.Time
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := fill(tx); err != nil {
			return err
		}
		if analyzeTable != "" {
			if _, err := tx.Exec(ctx, "ANALYZE "+pgx.Identifier{analyzeTable}.Sanitize()); err != nil {
				return err
			}
		}
		return tx.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&start)
	})
	if err != nil {
		return time.Time{}, fmt.Errorf("commit backlog: %w", err)
	}
	return start, nil
}

// analyzedTable is the table to ANALYZE in an analyzed drain's backlog
// transaction: none when not analyzed.
func analyzedTable(analyzed bool, table string) string {
	if analyzed {
		return table
	}
	return ""
}

// createdAhead is how far after the backlog's transaction began the rows of a
// SQLite backlog (liteFillOutbox) are created. The relay's scan floor rises to
// its clock less 2s on every claim that finds nothing (infra/outbox claim.go),
// and it claims while the backlog is being written: rows stamped at the
// transaction's start would lie below the floor if the transaction took longer
// than that.
const createdAhead = time.Minute

// fillOutbox inserts n pending RuleActivated rows as Append writes them
// (payload {"orgId","ruleId"}), created 1ms apart up to the transaction's
// start, as a backlog that built up while nothing drained it (a consumer that
// was down) is, all available from the transaction's start; then it sends the
// wake-up a requeue sends (delivered at the commit), which names the lowest
// created_at so that a relay whose scan floor rose past it while the
// transaction ran looks there at once.
//
// Choice: not stamped in the future (createdAhead, as on SQLite, which has no
// notification to carry the floor). A relay's floor cannot rise above its
// clock less 2s, so with rows ahead of its clock every claim scanned the
// pending index from the bottom of the backlog, through the dead entries of
// every row already settled: a drain quadratic in the backlog (0.83× the 10k
// rate at 100k), which rows stamped by a producer's clock (at or
// before the commit) never see.
func fillOutbox(ctx context.Context, tx pgx.Tx, n int) error {
	now := time.Now().UnixMilli()
	lowest := now - int64(n)
	for start := 0; start < n; start += 50000 {
		end := min(n, start+50000) - 1
		_, err := tx.Exec(ctx, `
			INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
			SELECT `+uuidV7SQL("$1::bigint + i")+`, 'RuleActivated',
				jsonb_build_object('orgId', md5('org' || (i % $3))::uuid, 'ruleId', gen_random_uuid()),
				$1::bigint + i, $4::bigint, 0
			FROM generate_series($2::int, $5::int) AS i`, lowest, start, orgs, now, end)
		if err != nil {
			return fmt.Errorf("fill outbox: %w", err)
		}
	}
	_, err := tx.Exec(ctx, notifyRequeued, fmt.Sprintf("requeued:%d", lowest))
	return err
}

// uuidV7SQL is an SQL expression for a UUIDv7 (RFC 9562) of the epoch
// milliseconds ms (an SQL expression): the ids Append gives rows
// (uuid.NewV7), time-ordered, so that a backlog's primary key is written and
// read near its right edge as the relay's is. Random ids (gen_random_uuid)
// spread a million rows' claims and settles over every leaf of the key, a
// working set that outgrows shared_buffers beside the table: a cost of the
// benchmark's ids, not of the relay's.
func uuidV7SQL(ms string) string {
	return `(lpad(to_hex(` + ms + `), 12, '0') || '7' || substr(md5(random()::text), 1, 3)
				|| to_hex(8 + floor(random() * 4)::int) || substr(md5(random()::text), 1, 15))::uuid`
}

// drainProbe is how a drain knows it is done and when it ended.
type drainProbe struct {
	q     db     // where the probe and the count run
	probe string // a row while work is pending
	// from, when set, is the probe from a key the last probe returned (its
	// first column, as text) on: the probe then reads from where work still
	// was, not from the bottom of the index.
	from      func(key string) string
	key       string
	countLeft string // rows left, read only when the drain is cut off
	// effects, when set, must hold n rows before the drain is done (the NATS
	// consumer applies after the relay settled): counted only once the probe
	// found nothing pending.
	effects    db
	effectsSQL string
	warmed     int // receipts the warm-up left, counted by effectsSQL too
	endDB      db  // where endSQL runs
	endSQL     string
}

// wait polls until the drain is done, ctx ends, or limit passes (errLimit,
// with the rows left and the database's clock as the end).
//
// The probe runs every 20ms at first and every fiftieth of the time waited so
// far later on (500ms at most): the end is the rows' stamp, not the probe's
// time, so a later probe changes no figure, while a probe every 20ms through a
// long drain's pending index (the dead entries of every row settled so far,
// unvacuumed) took a core of this 2-core machine from the drain it timed.
func (p *drainProbe) wait(ctx context.Context, n int, limit time.Duration) (end time.Time, left int64, err error) {
	began := time.Now()
	deadline := began.Add(limit)
	for {
		done, err := p.done(ctx, n)
		if err != nil {
			return time.Time{}, 0, err
		}
		if done {
			end, err := stampOf(ctx, p.endDB, p.endSQL)()
			if err != nil {
				return time.Time{}, 0, fmt.Errorf("end stamp: %w", err)
			}
			return end, 0, nil
		}
		if time.Now().After(deadline) {
			if p.effects != nil {
				var got int64
				if err := p.effects.one(ctx, p.effectsSQL, &got); err != nil {
					return time.Time{}, 0, err
				}
				left = int64(n+p.warmed) - got
			} else if err := p.q.one(ctx, p.countLeft, &left); err != nil {
				return time.Time{}, 0, err
			}
			if end, err = p.q.clock(ctx); err != nil {
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

func (p *drainProbe) done(ctx context.Context, n int) (bool, error) {
	pending, err := p.nothingPending(ctx)
	switch {
	case err != nil:
		return false, fmt.Errorf("probe: %w", err)
	case !pending:
		return false, nil
	case p.effects == nil:
		return true, nil
	}
	var got int64
	if err := p.effects.one(ctx, p.effectsSQL, &got); err != nil {
		return false, err
	}
	return got >= int64(n+p.warmed), nil
}

// nothingPending runs the probe (from the last key on, with from).
func (p *drainProbe) nothingPending(ctx context.Context) (bool, error) {
	if p.from == nil {
		return noRow(ctx, p.q, p.probe)()
	}
	query := p.probe
	if p.key != "" {
		query = p.from(p.key)
	}
	var key string
	err := p.q.one(ctx, query, &key)
	if errors.Is(err, errNoRow) {
		return true, nil
	}
	if err == nil {
		p.key = key
	}
	return false, err
}

// warmUp makes sure the system's wake-up path works before the clock starts:
// a system's LISTEN connection opens after it starts, and a backlog committed
// before it listens would wait for the next poll (1s for the relay and River
// alike), a second that has nothing to do with either's speed. It commits one
// item at a time (commit, which returns the commit's stamp) until one is done
// (done) with its effect stamped (end) within warmFast of its commit, which
// only a notification makes likely, and returns how many it committed. The
// items also warm the pools and connections the drain then uses.
func warmUp(ctx context.Context, commit func() (time.Time, error), done func() (bool, error), end func() (time.Time, error)) (int, error) {
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

// stampOf is end() for warmUp: the end stamp query's value.
func stampOf(ctx context.Context, q db, endSQL string) func() (time.Time, error) {
	return func() (time.Time, error) {
		at, err := q.at(ctx, endSQL)
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

// noRow is done() for a probe: true when the probe returns no row.
func noRow(ctx context.Context, q db, probe string) func() (bool, error) {
	return func() (bool, error) {
		var row any
		err := q.one(ctx, probe, &row)
		if errors.Is(err, errNoRow) {
			return true, nil
		}
		return false, err
	}
}

// countAtLeast is done() for the NATS pair: billing holds at least *n receipts.
func countAtLeast(ctx context.Context, q db, n *int) func() (bool, error) {
	return func() (bool, error) {
		var got int
		err := q.one(ctx, receiptsCountSQL, &got)
		return got >= *n, err
	}
}

// db is what the probes and the clocks read of a database, in either dialect.
type db interface {
	// one scans the query's first row into dest; errNoRow when it has none.
	one(ctx context.Context, query string, dest ...any) error
	// at reads the one time value the query returns (NULL: nil): a timestamptz
	// on PostgreSQL, epoch milliseconds on SQLite.
	at(ctx context.Context, query string) (*time.Time, error)
	// clock is the time now on the clock the database's stamps use.
	clock(ctx context.Context) (time.Time, error)
	// stamps reads bench_stamp (latency.go): event id to the stamp its
	// trigger took.
	stamps(ctx context.Context) (map[uuid.UUID]time.Time, error)
}

// errNoRow is one() on a query that returned no row, in either dialect.
var errNoRow = errors.New("no row")

// pgDB is db on a PostgreSQL pool: the server's clock.
type pgDB struct{ *pgxpool.Pool }

func (p pgDB) one(ctx context.Context, query string, dest ...any) error {
	return noRowAs(p.QueryRow(ctx, query).Scan(dest...), pgx.ErrNoRows)
}

// noRowAs is err, with none (a driver's "no rows") as errNoRow.
func noRowAs(err, none error) error {
	if errors.Is(err, none) {
		return errNoRow
	}
	return err
}

func (p pgDB) at(ctx context.Context, query string) (*time.Time, error) {
	var at *time.Time
	err := p.QueryRow(ctx, query).Scan(&at)
	return at, err
}

func (p pgDB) clock(ctx context.Context) (time.Time, error) {
	var now time.Time
	err := p.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&now)
	return now, err
}

func (p pgDB) stamps(ctx context.Context) (map[uuid.UUID]time.Time, error) {
	rows, err := p.Query(ctx, `SELECT id, at FROM bench_stamp`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectStamps(rows, func(scan func(...any) error) (id uuid.UUID, at time.Time, err error) {
		err = scan(&id, &at)
		return id, at, err
	})
}

// collectStamps reads bench_stamp's rows, each scanned by row.
func collectStamps(rows interface {
	Next() bool
	Scan(...any) error
	Err() error
}, row func(scan func(...any) error) (uuid.UUID, time.Time, error)) (map[uuid.UUID]time.Time, error) {
	m := map[uuid.UUID]time.Time{}
	for rows.Next() {
		id, at, err := row(rows.Scan)
		if err != nil {
			return nil, err
		}
		m[id] = at
	}
	return m, rows.Err()
}

package outbox

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
)

const (
	// claimTimeout bounds the claim statement. Stop does not cancel a claim
	// (one cut off after its commit would leave rows leased that nobody knows
	// of, waiting for their lease) until it must: when Stop returns or its
	// deadline passes, a claim still waiting then is cut off rather than hold
	// a connection of the pool, which is closed next, for up to claimTimeout.
	claimTimeout = 15 * time.Second
	// floorSlack is how far below what it has already scanned the background
	// loop's claim starts: an append whose transaction took up to this long (or
	// whose host's clock lags by up to this much) still commits above the floor.
	floorSlack = 2 * time.Second
)

// claimSQL is the claim statement of a relay whose ClaimSize is claimSize:
// it claims up to $4 rows (at most claimSize) in one statement. The inner
// select reads the partial index outbox_events_pending_idx (pending rows by
// created_at) from the floor $5 up, so it costs the same however many settled
// rows the table holds, vacuumed or not, as long as they lie below the floor. A
// claim is reclaimable when its lease expired, or when it lies more than twice
// its own lease (the claim_lease its claimer wrote) in the future: its
// claimer's clock ran ahead. Never by the reader's lease: a replica with a
// shorter one would take the live claims of a replica with a longer one. SKIP
// LOCKED lets relays claim side by side.
//
// Its shape is for the generic plan, the one a prepared statement is planned
// once with (the relay's connections force it, see ConnParams): whatever the
// parameters and the statistics, that plan must read the pending index and the
// primary key. The limit the planner sees is the literal claimSize, so it
// costs the index scan for that many rows, as a custom plan would; the rows
// this claim may take ($4, the free workers) are a second LIMIT above it,
// which stops the locking scan as soon as it has them. The update finds its
// rows by id = ANY(ARRAY(...)), whose estimate (a few rows, whatever the
// table's statistics say) keeps the primary key. The earlier form, a CTE with
// LIMIT $4 joined by UPDATE ... FROM, had a generic plan that guessed a tenth
// of the pending rows once the table was analyzed, and became a hash join over
// a sequential scan of the whole table (TestPlansStayOnIndexes).
//
// A row whose attempts are used up ($6) was claimed that many times and never
// settled the last time (its relay died or lost the database): it is
// dead-lettered here instead of claimed again, keeping attempts == $6, so a row
// that kills every process that takes it stops after MaxAttempts claims. Every
// other row gets the claim's token $7 and one more attempt.
//
// $1 now, $2 now + lease, $3 lease, $4 limit (1..claimSize), $5 floor
// (created_at), $6 max attempts, $7 claim token; epoch ms and ms.
func claimSQL(claimSize int) string {
	return `
UPDATE outbox_events o SET
	attempts      = CASE WHEN o.attempts >= $6::int THEN o.attempts ELSE o.attempts + 1 END,
	claimed_until = CASE WHEN o.attempts >= $6::int THEN NULL ELSE $2::bigint END,
	claim_token   = CASE WHEN o.attempts >= $6::int THEN NULL ELSE $7::uuid END,
	claim_lease   = CASE WHEN o.attempts >= $6::int THEN NULL ELSE $3::bigint END,
	failed_at     = CASE WHEN o.attempts >= $6::int THEN $1::bigint END,
	last_error    = CASE WHEN o.attempts >= $6
		THEN 'attempt ' || o.attempts || ' of ' || $6::int || ' was never settled (its relay died or lost the database while holding the claim); last error: ' || coalesce(o.last_error, 'none')
		ELSE o.last_error END
WHERE o.id = ANY(ARRAY(
	SELECT id FROM (
		SELECT id FROM outbox_events
		WHERE processed_at IS NULL AND failed_at IS NULL
			AND created_at >= $5::bigint AND available_at <= $1::bigint
			AND (claimed_until IS NULL OR claimed_until < $1::bigint OR claimed_until > $1::bigint + 2 * claim_lease)
		ORDER BY created_at
		LIMIT ` + strconv.Itoa(claimSize) + `
		FOR UPDATE SKIP LOCKED
	) pending
	LIMIT $4::int
))
RETURNING o.id, o.event_tag, o.payload, o.created_at, o.attempts, o.failed_at IS NOT NULL, o.trace_context`
}

// job is one claimed row on its way to a worker.
type job struct {
	Message
	token uuid.UUID
	// deadline is when the row must be done with, on the process's monotonic
	// clock: its lease end less the lease margin, kept for the settle.
	deadline time.Time
	// trace is the row's trace_context ("" when NULL, at no cost), decoded
	// only by a dispatch that traces. A string, not a []byte: job must stay
	// within 128 bytes, past which a map stores its values out of line and
	// r.held would allocate for every row (TestJobFitsInAMapSlot).
	trace string
}

// claimed is what one claim statement did.
type claimed struct {
	jobs  []job // rows to dispatch
	taken int   // rows the statement took, the dead-lettered ones included
	last  int64 // the highest created_at among them
	at    int64 // the claim's now, epoch ms
}

// claim claims up to limit rows created at floor or later. The rows are held
// (Stop releases what is not settled) before claim returns.
func (r *Relay) claim(ctx context.Context, limit int, floor int64) (claimed, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	defer context.AfterFunc(r.claimsCut, cancel)()
	start := time.Now()
	now := r.now()
	token := uuid.New()
	out := claimed{at: now.UnixMilli()}
	rows, err := r.pool.Query(ctx, r.claimSQL,
		now.UnixMilli(), now.Add(r.cfg.Lease).UnixMilli(), r.cfg.Lease.Milliseconds(),
		limit, floor, r.cfg.MaxAttempts, token)
	if err != nil {
		return out, fmt.Errorf("outbox: claim: %w", err)
	}
	deadline := start.Add(r.cfg.Lease - LeaseMargin(r.cfg.Lease))
	var dead []Message
	var traceCtx []byte // one per claim, not per row; NULL scans as nil
	for rows.Next() {
		var (
			j       = job{token: token, deadline: deadline}
			payload []byte // scanned as bytes: a json.RawMessage target would be parsed here once more
			isDead  bool
		)
		if err := rows.Scan(&j.ID, &j.Tag, &payload, &j.CreatedAt, &j.Attempt, &isDead, &traceCtx); err != nil {
			rows.Close()
			return out, fmt.Errorf("outbox: claim: %w", err)
		}
		if traceCtx != nil {
			j.trace = string(traceCtx) // only a traced append pays for this
		}
		j.Payload = payload
		out.taken++
		out.last = max(out.last, j.CreatedAt)
		if isDead {
			dead = append(dead, j.Message)
			continue
		}
		out.jobs = append(out.jobs, j)
	}
	if err := rows.Err(); err != nil {
		// The statement may have committed: the rows it leased are reclaimed when
		// the lease runs out.
		return out, fmt.Errorf("outbox: claim: %w", err)
	}
	r.hold(out.jobs)
	for _, j := range out.jobs {
		claimedTotal.WithLabelValues(j.Tag).Inc()
	}
	for _, m := range dead {
		deadTotal.WithLabelValues(m.Tag).Inc()
		r.logger.Warn("outbox row failed: its attempts were used up by claims that were never settled; dead-lettered until an operator requeues or deletes it",
			"id", m.ID, "tag", m.Tag, "attempts", m.Attempt)
	}
	return out, nil
}

// hold records claimed rows as this relay's until they are settled or released.
func (r *Relay) hold(jobs []job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, j := range jobs {
		r.held[j.ID] = j
	}
}

// unhold forgets a row once an outcome of its claim was flushed.
func (r *Relay) unhold(id, token uuid.UUID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if j, ok := r.held[id]; ok && j.token == token {
		delete(r.held, id)
	}
}

// scanFloor is the background loop's floor: the lowest created_at its claims
// still look at. The dead index entries of settled rows lie below it, so a
// claim does not read them again and again while autovacuum has not removed
// them (or cannot, behind a long transaction).
//
// Why nothing is missed: a claim that took fewer rows than it asked for saw
// every claimable row at or above the floor, so the floor may rise to the
// claim's now − floorSlack, below which no row can commit later unless its
// transaction took longer than floorSlack. A claim that took all it asked for
// saw every claimable row up to the last created_at it took, so the floor may
// rise to that (or to now − floorSlack if lower). What can still appear below
// the floor: a row that was not claimable when the scan passed it (leased,
// delayed by a retry, locked by another relay), or committed by a transaction
// longer than floorSlack. Every sweepInterval the floor drops to 0 and the next
// claims walk up from the bottom again, so such a row waits at most one sweep
// interval (plus the walk) longer than it would have without the floor. A
// requeued row (an old created_at made claimable) is announced by its
// requeue's notification, which drops the floor to it at once (lower).
type scanFloor struct {
	ms        int64
	lastSweep time.Time
	every     time.Duration
}

// next is the floor for the next claim, 0 when a sweep is due.
func (f *scanFloor) next(now time.Time) int64 {
	if now.Sub(f.lastSweep) >= f.every {
		f.lastSweep = now
		f.ms = 0
	}
	return f.ms
}

// lower drops the floor to ms: rows were made claimable there (a requeue).
func (f *scanFloor) lower(ms int64) { f.ms = min(f.ms, ms) }

// advance raises the floor after a claim that asked for limit rows.
func (f *scanFloor) advance(c claimed, limit int) {
	below := c.at - floorSlack.Milliseconds()
	if c.taken >= limit {
		below = min(below, c.last)
	}
	f.ms = max(f.ms, below)
}

// sweepInterval is how often the background loop rescans from the bottom.
func sweepInterval(poll time.Duration) time.Duration {
	return min(max(5*poll, time.Second), 30*time.Second)
}

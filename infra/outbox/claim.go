package outbox

import (
	"context"
	"fmt"
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

// job is one claimed row on its way to a worker.
type job struct {
	Message // ID is the row's id, the one the relay settles; the handlers get event instead (sent)
	token   uuid.UUID
	// event is the event's id, coalesce(event_id, id): every subscriber of
	// the event receives it as Message.ID, so all dedup on the same id.
	event uuid.UUID
	// deadline is when the row must be done with, on the process's monotonic
	// clock: its lease end less the lease margin, kept for the settle.
	deadline monoTime
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
	deadline := monoOf(start.Add(r.cfg.Lease - LeaseMargin(r.cfg.Lease)))
	var dead []Message
	err := r.store.Claim(ctx, ClaimArgs{
		Now: now.UnixMilli(), Until: now.Add(r.cfg.Lease).UnixMilli(), Lease: r.cfg.Lease.Milliseconds(),
		Limit: limit, Floor: floor, MaxAttempts: r.cfg.MaxAttempts, Token: token,
		Subscriber: r.subscriber,
	}, func(c ClaimedRow) {
		j := job{token: token, deadline: deadline, event: c.EventID}
		j.ID, j.Tag, j.Payload, j.CreatedAt, j.Attempt = c.ID, c.Tag, c.Payload, c.CreatedAt, c.Attempts
		if c.Trace != nil {
			j.trace = string(c.Trace) // only a traced append pays for this
		}
		out.taken++
		out.last = max(out.last, j.CreatedAt)
		if c.Dead {
			dead = append(dead, j.Message)
			return
		}
		out.jobs = append(out.jobs, j)
	})
	if err != nil {
		// The statement may have committed: the rows it leased are reclaimed when
		// the lease runs out.
		return claimed{at: out.at}, fmt.Errorf("outbox: claim: %w", err)
	}
	r.hold(out.jobs)
	for _, j := range out.jobs {
		r.m.claimed.WithLabelValues(j.Tag, r.subscriber).Inc()
	}
	for _, m := range dead {
		r.m.dead.WithLabelValues(m.Tag, r.subscriber).Inc()
		r.logger.Warn("outbox row failed: its attempts were used up by claims that were never settled; dead-lettered until an operator requeues or deletes it",
			"id", m.ID, "tag", m.Tag, "subscriber", r.subscriber, "attempts", m.Attempt)
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

// sent is the message the handlers get: the row's, with the event's id.
func (j *job) sent() Message {
	m := j.Message
	if j.event != uuid.Nil {
		m.ID = j.event
	}
	return m
}

// monoTime is an instant on the process's monotonic clock, in 8 bytes rather
// than time.Time's 24: a job must fit in a map slot (TestJobFitsInAMapSlot),
// and the event id took the room.
type monoTime int64

// monoEpoch is the origin of monoTime.
var monoEpoch = time.Now()

func monoOf(t time.Time) monoTime { return monoTime(t.Sub(monoEpoch)) }

// time is m as a time.Time, with its monotonic reading.
func (m monoTime) time() time.Time { return monoEpoch.Add(time.Duration(m)) }

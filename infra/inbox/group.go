package inbox

import (
	"context"
	"slices"
	"sync/atomic"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/fault"
)

// Group apply: one commit for many deliveries. A commit costs a round trip and a
// WAL flush whatever it carries, so one transaction per event caps a consumer at the
// database's commit rate. Here the first call that finds no transaction in flight
// becomes the leader and commits at once with whatever is already waiting (with
// a single delivery in flight that is itself alone: no added wait). Calls that
// arrive meanwhile queue; when the leader's commit returns it hands the lead to
// the oldest waiting call, which takes up to groupMax-1 of the others into the
// next transaction. There is no goroutine of its own and nothing to stop: a
// leader is always a caller, and it always hands off before it returns.

// reqState is where a waiting call is; guarded by Inbox.mu.
type reqState int

const (
	queued   reqState = iota // in Inbox.queue
	grouped                  // taken into a leader's group; its result will come on done
	promoted                 // chosen as the next leader; signalled on lead
)

// applyReq is one call of Apply waiting in the queue.
type applyReq[V any] struct {
	ctx   context.Context
	e     Event[V]
	state reqState
	done  chan groupResult // buffered: the leader never blocks on a caller that left
	lead  chan struct{}    // buffered, likewise
}

// groupResult is one member's outcome of a group transaction.
type groupResult struct {
	applied bool
	err     error
	alone   bool // the group failed in a way one member may cause: apply on its own
}

// applyGrouped applies e in the next group transaction and returns its own result.
func (s *Inbox[V]) applyGrouped(ctx context.Context, e Event[V]) (bool, error) {
	r := &applyReq[V]{ctx: ctx, e: e, done: make(chan groupResult, 1), lead: make(chan struct{}, 1)}
	s.mu.Lock()
	if !s.busy {
		s.busy = true
		s.mu.Unlock()
		return s.lead(r)
	}
	s.queue = append(s.queue, r)
	s.m.waiting.Inc()
	s.mu.Unlock()

	select {
	case res := <-r.done:
		return s.finish(r, res)
	case <-r.lead:
		return s.lead(r)
	case <-ctx.Done():
	}
	s.mu.Lock()
	switch r.state {
	case queued:
		s.queue = slices.DeleteFunc(s.queue, func(q *applyReq[V]) bool { return q == r })
		s.m.waiting.Dec()
		s.mu.Unlock()
	case promoted:
		// The queue waits for this call to lead; pass the lead on instead.
		s.mu.Unlock()
		s.handOff()
	default:
		s.mu.Unlock()
		// In a group: if it has committed, say so; if it may still commit,
		// failing is safe (the sender's retry finds the receipt). Success is never
		// answered before the commit.
		select {
		case res := <-r.done:
			return s.finish(r, res)
		default:
		}
	}
	return false, s.classify(ctx.Err())
}

// lead applies r with the calls waiting now (at most groupMax in all), hands the
// lead to the next waiting call, gives each member its result and returns r's.
func (s *Inbox[V]) lead(r *applyReq[V]) (bool, error) {
	s.mu.Lock()
	n := min(len(s.queue), s.opts.groupMax-1)
	group := make([]*applyReq[V], 0, n+1)
	group = append(group, r)
	for _, m := range s.queue[:n] {
		m.state = grouped
		group = append(group, m)
	}
	s.queue = slices.Delete(s.queue, 0, n)
	s.m.waiting.Sub(float64(n))
	s.mu.Unlock()

	answered := false
	defer func() {
		// A panic in the transaction (a defect) propagates to this caller's
		// recovery, but must not leave the queue without a leader for ever.
		if !answered {
			s.handOff()
			for _, m := range group[1:] {
				m.done <- groupResult{err: fault.Errorf(fault.Internal, "internal error")}
			}
		}
	}()
	results := s.applyGroup(group)
	answered = true
	// Hand off before answering, so that the next group's commit is not delayed
	// by this group's responses.
	s.handOff()
	for i, m := range group[1:] {
		m.done <- results[i+1]
	}
	return s.finish(r, results[0])
}

// handOff makes the oldest waiting call the next leader, or marks that no
// transaction is in flight when none waits.
func (s *Inbox[V]) handOff() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		s.busy = false
		return
	}
	next := s.queue[0]
	s.queue = slices.Delete(s.queue, 0, 1)
	s.m.waiting.Dec()
	next.state = promoted
	next.lead <- struct{}{}
}

// finish turns a member's group result into Apply's answer.
func (s *Inbox[V]) finish(r *applyReq[V], res groupResult) (bool, error) {
	if res.alone {
		return s.applyAlone(r.ctx, r.e)
	}
	return res.applied, res.err
}

// applyGroup applies the group's events in one transaction. A duplicate within
// the group is applied once: the first member with the id reports applied, the
// others already applied, as a redelivery would. When the transaction fails,
// every member fails with it, except that a group of several distinct events
// that failed with an Internal error (a defect, which one event may cause) sends
// each member to apply alone: one bad event must not fail the others for ever.
// An unavailable database fails them all, and each sender retries as it would
// a lone delivery.
func (s *Inbox[V]) applyGroup(group []*applyReq[V]) []groupResult {
	first := make(map[uuid.UUID]int, len(group))
	events := make([]Event[V], 0, len(group))
	for i, m := range group {
		if _, dup := first[m.e.ID]; !dup {
			first[m.e.ID] = i
			events = append(events, m.e)
		}
	}
	ctx, stop := groupContext(group)
	defer stop()
	s.m.groupSizes.Observe(float64(len(group)))
	fresh, err := s.commit(ctx, events)

	results := make([]groupResult, len(group))
	for i, m := range group {
		switch {
		case err == nil:
			results[i].applied = fresh[m.e.ID] && first[m.e.ID] == i
		case len(events) > 1 && fault.CodeOf(err) == fault.Internal:
			results[i].alone = true
		default:
			results[i].err = err
		}
	}
	if err != nil && len(events) > 1 {
		s.logger.Warn("group apply failed", "events", len(events), "error", err,
			"retry_alone", fault.CodeOf(err) == fault.Internal)
	}
	return results
}

// groupContext is the context of a group's transaction: it keeps the leader's
// values (its trace) and ends only when every member's context has ended, so a
// member that gives up (its request timed out) never cancels the others' commit.
// A lone member's context is used as it is.
func groupContext[V any](group []*applyReq[V]) (context.Context, func()) {
	if len(group) == 1 {
		return group[0].ctx, func() {}
	}
	ctx, cancel := context.WithCancel(context.WithoutCancel(group[0].ctx))
	var live atomic.Int64
	live.Store(int64(len(group)))
	stops := make([]func() bool, len(group))
	for i, m := range group {
		stops[i] = context.AfterFunc(m.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// Waiting reports how many calls of Apply wait for the next group transaction
// (NAME_apply_waiting), so that a test can line deliveries up behind a
// transaction it holds.
func (s *Inbox[V]) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

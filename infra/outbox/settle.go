package outbox

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
)

const (
	// flushInterval is the most an outcome waits for its batch to fill.
	flushInterval = 20 * time.Millisecond
	// flushBatch outcomes waiting trigger a flush at once; one statement
	// settles at most maxFlush.
	flushBatch = 100
	maxFlush   = 1000
	// maxPending outcomes waiting (the database slow or away) make the
	// workers wait before handing over more, so memory stays bounded.
	maxPending = 10 * maxFlush
	// settleTimeout bounds one flush. A background flush runs on a context of
	// its own, not the dispatch's: a dispatch that finished must be recorded
	// even while the relay is being stopped, or it would be delivered again.
	// Only the stop's deadline cuts it short (see close).
	settleTimeout = 5 * time.Second
	// flushRetry is the first wait after a failed flush; it doubles up to
	// flushRetryMax.
	flushRetry    = 50 * time.Millisecond
	flushRetryMax = 5 * time.Second
)

type kind string

const (
	kindProcessed kind = "processed"
	kindRetry     kind = "retry"
	kindFailed    kind = "failed"
	kindRelease   kind = "release"
	// kindWait makes the row available at a later time and gives back the
	// attempt its claim took (Wait).
	kindWait kind = "wait"
)

// outcome is the settle one claim calls for.
type outcome struct {
	job
	kind  kind
	at    int64  // processed_at, available_at or failed_at, by kind
	err   string // last_error, for retry, wait and failed
	cause error  // the dispatch error, for the log
}

// settler batches outcomes into settle statements: flushed when flushBatch are
// waiting, flushInterval after the first of a batch arrived, and on close. A
// flush that fails keeps its outcomes and is retried with a growing wait.
type settler struct {
	r *Relay

	mu      sync.Mutex
	pending []outcome
	room    *sync.Cond // signalled when pending shrinks
	closed  bool

	wake chan struct{} // size 1: the first outcome of a batch arrived
	full chan struct{} // size 1: flushBatch are waiting
	stop chan struct{}
	done chan struct{}

	// runCtx is the background flushes' context: ended only when the stop's
	// deadline passes, so a flush hung on an unreachable database cannot hold
	// Stop past it.
	runCtx    context.Context
	cancelRun context.CancelFunc
}

func newSettler(r *Relay) *settler {
	runCtx, cancelRun := context.WithCancel(context.Background())
	s := &settler{
		r:         r,
		wake:      make(chan struct{}, 1),
		full:      make(chan struct{}, 1),
		stop:      make(chan struct{}),
		done:      make(chan struct{}),
		runCtx:    runCtx,
		cancelRun: cancelRun,
	}
	s.room = sync.NewCond(&s.mu)
	return s
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// add queues outcomes. It waits while maxPending are waiting, unless the
// settler is closing.
func (s *settler) add(os ...outcome) {
	s.mu.Lock()
	for len(s.pending) >= maxPending && !s.closed {
		s.room.Wait()
	}
	wasEmpty := len(s.pending) == 0
	if s.closed {
		// Only while closing can one claim have two outcomes: close releases
		// every held row it saw no outcome for, and a worker may hand over the
		// row's real outcome just before or after that.
		os = s.supersede(os)
	}
	s.pending = append(s.pending, os...)
	n := len(s.pending)
	s.mu.Unlock()
	if wasEmpty {
		signal(s.wake)
	}
	if n >= flushBatch {
		signal(s.full)
	}
}

// claimKey names one claim of one row: the unit that carries one outcome.
type claimKey struct{ id, token uuid.UUID }

// supersede keeps one outcome per claim across what is waiting and os, the
// real outcome (processed, retry, failed) winning over a release: a release
// waiting for a claim whose real outcome arrives is dropped, and a release for
// a claim that already has an outcome waiting is not added. It returns what of
// os is left to add. Called with s.mu held.
func (s *settler) supersede(os []outcome) []outcome {
	waiting := make(map[claimKey]int, len(s.pending))
	for i, o := range s.pending {
		waiting[claimKey{o.ID, o.token}] = i
	}
	keep := os[:0:0]
	for _, o := range os {
		k := claimKey{o.ID, o.token}
		i, ok := waiting[k]
		switch {
		case !ok:
		case o.kind == kindRelease:
			continue
		case s.pending[i].kind == kindRelease:
			s.pending[i] = o
			continue
		}
		waiting[k] = len(s.pending) + len(keep)
		keep = append(keep, o)
	}
	return keep
}

// dedupe leaves one outcome per claim in batch, the real outcome winning over
// a release: one UPDATE ... FROM unnest that joins a row twice applies either
// of the two, so a delivered row could be released and delivered again. Only a
// batch that holds a release can have two; any other costs one pass.
func dedupe(batch []outcome) []outcome {
	releases := false
	for _, o := range batch {
		if o.kind == kindRelease {
			releases = true
			break
		}
	}
	if !releases {
		return batch
	}
	at := make(map[claimKey]int, len(batch))
	out := batch[:0]
	for _, o := range batch {
		k := claimKey{o.ID, o.token}
		if i, ok := at[k]; ok {
			if out[i].kind == kindRelease {
				out[i] = o
			}
			continue
		}
		at[k] = len(out)
		out = append(out, o)
	}
	return out
}

// run flushes in the background until stop.
func (s *settler) run() {
	defer close(s.done)
	failures := 0
	for {
		select {
		case <-s.stop:
			return
		case <-s.wake:
		case <-s.full:
		}
		if failures == 0 {
			t := time.NewTimer(flushInterval)
			select {
			case <-s.stop:
				t.Stop()
				return
			case <-s.full:
			case <-t.C:
			}
			t.Stop()
		}
		for {
			n, err := s.flush(s.runCtx)
			if err != nil {
				failures++
				wait := failBackoff(failures, flushRetry, flushRetryMax)
				if failures == 1 {
					s.r.logger.Warn("outbox settle failed; keeping the outcomes and retrying",
						"err", err, "retry_in", wait)
				}
				signal(s.wake)
				select {
				case <-s.stop:
					return
				case <-time.After(wait):
				}
				break
			}
			if failures > 0 {
				s.r.logger.Info("outbox settles recovered", "failed_flushes", failures)
				failures = 0
			}
			if n < maxFlush && s.waiting() < flushBatch {
				if s.waiting() > 0 {
					signal(s.wake)
				}
				break
			}
		}
	}
}

func (s *settler) waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// flush settles up to maxFlush waiting outcomes in one statement. On failure
// they are put back, to be retried.
func (s *settler) flush(ctx context.Context) (int, error) {
	s.mu.Lock()
	n := min(len(s.pending), maxFlush)
	batch := make([]outcome, n)
	copy(batch, s.pending)
	s.pending = append(s.pending[:0], s.pending[n:]...)
	s.room.Broadcast()
	s.mu.Unlock()
	if n == 0 {
		return 0, nil
	}
	batch = dedupe(batch)
	settled, err := s.exec(ctx, batch)
	if err != nil {
		s.mu.Lock()
		s.pending = append(batch, s.pending...)
		s.mu.Unlock()
		return 0, err
	}
	s.r.recordSettled(batch, settled)
	return n, nil
}

// exec runs one settle statement, bounded by settleTimeout and by ctx.
func (s *settler) exec(ctx context.Context, batch []outcome) (map[uuid.UUID]struct{}, error) {
	ctx, cancel := context.WithTimeout(ctx, settleTimeout)
	defer cancel()
	settlements := make([]Settlement, len(batch))
	for i, o := range batch {
		settlements[i] = Settlement{ID: o.ID, Token: o.token, Kind: string(o.kind), At: o.at}
		if o.kind == kindRetry || o.kind == kindWait || o.kind == kindFailed {
			settlements[i].Err = &batch[i].err
		}
	}
	settled, err := s.r.store.Settle(ctx, settlements)
	if err != nil {
		return nil, fmt.Errorf("outbox: settle: %w", err)
	}
	return settled, nil
}

// flushAll flushes until nothing waits or ctx ends, retrying failed flushes.
func (s *settler) flushAll(ctx context.Context) error {
	failures := 0
	for {
		n, err := s.flush(ctx)
		switch {
		case err == nil && n == 0:
			return nil
		case err == nil:
			failures = 0
			continue
		}
		failures++
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (%d outcomes not settled)", err, s.waiting())
		case <-time.After(failBackoff(failures, flushRetry, flushRetryMax)):
		}
	}
}

// close stops the background flushes, releases every held row that has no
// outcome waiting, and flushes everything, all by ctx's deadline (10s without
// one), whatever the database does: a flush in flight, the background one
// included, is cut off there. If the outcomes cannot be settled within half of
// ctx's time (a row the database refuses to settle fails its whole batch), the
// rest of the time goes to releasing those rows instead: a lost outcome is only
// a redelivery, a row left leased waits for its lease. It fails when some row
// could be neither settled nor released: those are reclaimed when their lease
// ends, never lost.
func (s *settler) close(ctx context.Context, started bool) error {
	defer s.cancelRun()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*settleTimeout)
		defer cancel()
	}
	s.mu.Lock()
	s.closed = true
	s.room.Broadcast()
	s.mu.Unlock()
	if started {
		unhook := context.AfterFunc(ctx, s.cancelRun)
		close(s.stop)
		<-s.done
		unhook()
	}
	s.mu.Lock()
	waiting := make(map[uuid.UUID]uuid.UUID, len(s.pending))
	for _, o := range s.pending {
		waiting[o.ID] = o.token
	}
	s.mu.Unlock()
	var releases []outcome
	s.r.mu.Lock()
	for id, j := range s.r.held {
		if t, ok := waiting[id]; !ok || t != j.token {
			releases = append(releases, s.r.release(j))
		}
	}
	s.r.mu.Unlock()
	s.add(releases...)

	// From here on every settle and release commits durably before Stop
	// returns (and the process exits 0), though the relay's connections run
	// with synchronous_commit off: see durable.
	ctx = durable(ctx)
	settleCtx, cancel := context.WithTimeout(ctx, halfOf(ctx, settleTimeout))
	err := s.flushAll(settleCtx)
	cancel()
	if err != nil && ctx.Err() == nil {
		s.mu.Lock()
		unsettled := len(s.pending)
		for i, o := range s.pending {
			s.pending[i] = s.r.release(o.job)
		}
		s.mu.Unlock()
		s.r.logger.Warn("outbox relay could not settle its last outcomes; releasing those rows instead",
			"rows", unsettled, "err", err)
		err = s.flushAll(ctx)
	}
	if len(releases) > 0 {
		s.r.logger.Info("outbox relay released unsettled claims", "rows", len(releases), "failed", err != nil)
	}
	if err != nil {
		return fmt.Errorf("outbox: stop: %w; the rows not settled or released are reclaimed when their lease ends", err)
	}
	return nil
}

type durableKey struct{}

// durable marks ctx so that a settle run on it waits for its commit to be on
// disk (PostgreSQL: synchronous_commit on for that transaction; SQLite commits
// with synchronous=FULL always). Stop's last flushes run on it: the relay's
// connections commit asynchronously for speed, and a database crash just after
// an exit 0 would otherwise lose the release of the claims, leaving those rows
// leased until their lease ends. One synchronous commit also makes durable
// every asynchronous commit before it on any connection: PostgreSQL's commit
// waits for the WAL to be flushed up to its own commit record, and WAL is one
// sequence, so everything written before it (the earlier settles' commit
// records included) is flushed with it.
func durable(ctx context.Context) context.Context {
	return context.WithValue(ctx, durableKey{}, true)
}

// isDurable reports whether ctx was marked by durable.
func isDurable(ctx context.Context) bool {
	v, _ := ctx.Value(durableKey{}).(bool)
	return v
}

// halfOf is half the time left before ctx's deadline, or def without one.
func halfOf(ctx context.Context, def time.Duration) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return def
	}
	return time.Until(deadline) / 2
}

// recordSettled counts a flushed batch and forgets its rows. An outcome whose
// row did not match was fenced off: its claim is no longer the row's.
func (r *Relay) recordSettled(batch []outcome, settled map[uuid.UUID]struct{}) {
	for _, o := range batch {
		r.unhold(o.ID, o.token)
		if _, ok := settled[o.ID]; !ok {
			if o.kind != kindRelease {
				r.m.fenced.WithLabelValues(o.Tag, r.subscriber).Inc()
				r.logger.Info("outbox settle fenced off: the row was reclaimed elsewhere",
					"id", o.ID, "tag", o.Tag, "attempt", o.Attempt, "outcome", string(o.kind))
			}
			continue
		}
		switch o.kind {
		case kindProcessed:
			r.m.processed.WithLabelValues(o.Tag, r.subscriber).Inc()
		case kindFailed:
			r.m.dead.WithLabelValues(o.Tag, r.subscriber).Inc()
			r.logger.Warn("outbox row failed: dead-lettered until an operator requeues or deletes it",
				"id", o.ID, "tag", o.Tag, "attempts", o.Attempt, "permanent", IsPermanent(o.cause), "err", o.cause)
		case kindRetry:
			r.m.retried.WithLabelValues(o.Tag, r.subscriber).Inc()
			r.attempts.failed(o, time.UnixMilli(o.at))
		case kindWait:
			r.logger.Debug("outbox row waits without spending an attempt",
				"id", o.ID, "tag", o.Tag, "attempts", o.Attempt-1, "until", time.UnixMilli(o.at).UTC(), "reason", o.cause)
		}
	}
}

package outbox

import (
	"context"
	"fmt"
	"runtime/debug"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/codes"

	"github.com/acme/outboxpair/infra/failpoint"
)

// worker is one of the relay's long-lived dispatchers: it takes claimed rows
// from the queue until the queue closes. A worker whose handler overran its
// timeout has already been replaced (see execute) and exits once the handler
// finally returns.
func (r *Relay) worker() {
	for j := range r.queue {
		if !r.execute(r.runCtx, j, r.finish, r.spawnWorker) {
			return
		}
	}
}

func (r *Relay) spawnWorker() { go r.worker() }

// finish hands a dispatched row's outcome to the settler and frees its slot.
func (r *Relay) finish(o outcome) {
	r.settler.add(o)
	r.inflight.Done()
	r.mu.Lock()
	r.busy--
	r.mu.Unlock()
	select {
	case r.freed <- struct{}{}:
	default:
	}
}

// execute runs j's handlers in order, on the calling goroutine, under the
// handler timeout (shortened to the row's deadline), and reports the outcome
// exactly once. A panic is recovered into a failed attempt. If parent ends
// first (Stop abandoned the dispatch, or RunOnce's context ended), the row is
// released rather than failed.
//
// A handler that ignores its context cannot hold the row: when the timeout
// passes, a timer reports the outcome, calls spare (to start a replacement
// worker) and execute returns false once the handler finally returns, telling
// the caller to take no more work. No goroutine is started for a row unless
// its handler overruns.
func (r *Relay) execute(parent context.Context, j job, report func(outcome), spare func()) bool {
	start := time.Now()
	handlers := r.subs[j.Tag]
	switch {
	case parent.Err() != nil || !start.Before(j.deadline.time()):
		// Abandoned before it began, or waited so long that no dispatch could
		// be settled within the lease.
		report(r.release(j))
		return true
	case len(handlers) == 0:
		// Retried normally: the subscriber may arrive with the next deploy.
		report(r.outcomeOf(j, fmt.Errorf("no subscriber for tag %s", j.Tag), start))
		return true
	}
	deadline := start.Add(r.cfg.HandlerTimeout)
	if due := j.deadline.time(); due.Before(deadline) {
		deadline = due
	}
	ctx, cancel := context.WithDeadline(parent, deadline)
	defer cancel()
	// A variable of its own: reassigning ctx would move it to the heap (the
	// timer's closure captures it), an allocation per row with tracing off.
	hctx, span := processSpan(ctx, j) // nil, at no cost, unless tracing is on and the row carries a trace
	if span != nil {
		defer span.End()
	}
	var state atomic.Int32 // 0 running, 1 returned in time, 2 cut off
	stop := context.AfterFunc(ctx, func() {
		if !state.CompareAndSwap(0, 2) {
			return
		}
		if parent.Err() != nil {
			r.observe(j, "abandoned", start)
			report(r.release(j))
		} else {
			report(r.outcomeOf(j, fmt.Errorf("%s handler: %w", j.Tag, ctx.Err()), start))
		}
		if spare != nil {
			spare()
		}
	})
	err := r.callHandlers(hctx, j.sent(), handlers)
	if span != nil && err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, j.Tag+" handler failed")
	}
	if !state.CompareAndSwap(0, 1) {
		return false // the timer reported this row and replaced this worker
	}
	stop()
	if err == nil {
		// A failure injected here is a failed attempt, as a lost settle would be.
		err = failpoint.Inject(failpoint.RelayAfterDispatch)
	}
	if err != nil && parent.Err() != nil {
		// Abandoned, not failed: give the row back without spending an
		// attempt's delay on it.
		r.observe(j, "abandoned", start)
		report(r.release(j))
		return true
	}
	report(r.outcomeOf(j, err, start))
	return true
}

// callHandlers runs the handlers in order; the first error stops them.
func (r *Relay) callHandlers(ctx context.Context, m Message, handlers []Handler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			r.logger.ErrorContext(ctx, "outbox handler panicked", "id", m.ID, "tag", m.Tag,
				"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
			err = fmt.Errorf("panic in %s handler: %v", m.Tag, p)
		}
	}()
	for _, h := range handlers {
		if err := h(ctx, m); err != nil {
			return err
		}
	}
	return nil
}

func (r *Relay) observe(j job, outcome string, start time.Time) {
	r.m.dispatchSeconds.WithLabelValues(j.Tag, outcome, r.subscriber).Observe(time.Since(start).Seconds())
}

// outcomeOf turns a dispatch result into the settle it calls for.
func (r *Relay) outcomeOf(j job, err error, start time.Time) outcome {
	o := outcome{job: j, cause: err}
	now := r.now()
	switch {
	case err == nil:
		r.observe(j, "ok", start)
		o.kind, o.at = kindProcessed, now.UnixMilli()
		return o
	case IsPermanent(err):
		o.kind, o.at = kindFailed, now.UnixMilli()
	case isWait(err):
		// Before the attempt limit: a wait is no attempt, the last included.
		d, _ := WaitOf(err)
		o.kind, o.at = kindWait, now.Add(max(d, 0)).UnixMilli()
	case j.Attempt >= r.cfg.MaxAttempts:
		o.kind, o.at = kindFailed, now.UnixMilli()
	default:
		o.kind, o.at = kindRetry, now.Add(r.retryDelay(j.Attempt, err)).UnixMilli()
	}
	r.observe(j, "error", start)
	o.err = errorText(err)
	return o
}

func isWait(err error) bool {
	_, ok := WaitOf(err)
	return ok
}

// retryDelay is the wait before the next attempt of a row whose attempt
// failed with err: the durable backoff, or what err asks for through
// RetryAfter when that is longer, at most RetryMax.
func (r *Relay) retryDelay(attempt int, err error) time.Duration {
	delay := durableDelay(attempt, r.cfg.RetryBase, r.cfg.RetryMax)
	if after, ok := RetryAfterOf(err); ok && after > delay {
		delay = min(after, r.cfg.RetryMax)
	}
	return delay
}

// release is the outcome that gives a claim back: claimable again at once, the
// attempt still counted.
func (r *Relay) release(j job) outcome {
	return outcome{job: j, kind: kindRelease}
}

package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/failpoint"
)

// stopReserve is the most of Stop's time kept for releasing abandoned claims.
const stopReserve = 2 * time.Second

// Relay claims pending rows and hands them to their subscribers. Any number of
// relays may run on one table at once, in one process or many, with no leader.
//
// Inside, a claim loop keeps up to Workers rows in flight: it claims again (at
// most ClaimSize rows a statement) as soon as enough slots are free (at once
// while rows keep coming, on a poll, a Nudge or a notification otherwise),
// never waiting for the slowest row of the last batch. Workers long-lived
// workers dispatch the rows, and a settler records their outcomes in batches,
// one statement for many rows.
type Relay struct {
	store    RelayStore // the relay's own statements and connections (Store.OpenRelay)
	m        *metrics   // the series of store's table
	listener Listener   // store's LISTEN/NOTIFY, nil when the dialect has none
	cfg      Config
	// subscriber is the one whose rows the relay claims (DefaultSubscriber,
	// or a Lane's): the subscriber column its claims filter on and the label
	// of its metrics.
	subscriber string
	subs       map[string][]Handler
	logger     *slog.Logger
	now        func() time.Time
	settler    *settler
	// attempts logs failed delivery attempts, rate-limited.
	attempts *attemptLog

	nudge     chan struct{} // size 1: a pending wake-up is never lost and Nudge never blocks
	broadcast chan struct{} // size 1: a Nudge to pass on to the other relays
	freed     chan struct{} // size 1: a slot was freed
	queue     chan job      // claimed rows for the workers

	// lowest is the lowest created_at a requeue named since the loop last
	// looked (noFloor when none): the loop's floor drops to it.
	lowest atomic.Int64

	mu       sync.Mutex
	started  bool
	busy     int               // rows claimed by the loop whose outcome is not yet with the settler
	held     map[uuid.UUID]job // claimed and not yet settled or released: Stop releases them
	inflight sync.WaitGroup    // the loop's rows not yet handed to the settler

	stopOnce   sync.Once
	stopping   chan struct{}   // closed by Stop: claim nothing more
	done       chan struct{}   // closed when the loop has returned
	listenDone chan struct{}   // closed when the listener has returned
	runCtx     context.Context // parent of every dispatch the loop makes
	abandon    context.CancelFunc
	// claimsCut ends when Stop returns or its deadline passes: a claim still
	// waiting for the database then is cut off (see claim).
	claimsCut context.Context
	cutClaims context.CancelFunc
}

// NewRelay returns a relay over store's database that dispatches to subs. It
// fails when cfg is invalid, naming the values. The relay runs its statements
// through store.OpenRelay: on PostgreSQL on connections of its own (at most
// three, opened from the pool's settings with ConnParams, closed by Stop), so
// its claims never wait for a connection the API's requests hold, and the
// API's never wait for the relay's; on SQLite on the process's one writer.
//
// The relay claims only the default subscriber's rows (DefaultSubscriber):
// with fan-out (WithRoutes), each further subscriber's rows are another
// relay's (NewLanes).
func NewRelay(store Store, cfg Config, subs []Subscriber, logger *slog.Logger) (*Relay, error) {
	return newRelay(store, cfg, DefaultSubscriber, subs, logger)
}

func newRelay(store Store, cfg Config, subscriber string, subs []Subscriber, logger *slog.Logger) (*Relay, error) {
	if store == nil {
		return nil, errors.New("outbox: relay needs a store")
	}
	if err := cfg.check(FieldName, false); err != nil {
		return nil, fmt.Errorf("outbox: invalid relay config: %w", err)
	}
	byTag := make(map[string][]Handler)
	for i, s := range subs {
		if s.Tag == "" || s.Handle == nil {
			return nil, fmt.Errorf("outbox: subscriber %d has an empty tag or a nil handler", i)
		}
		byTag[s.Tag] = append(byTag[s.Tag], s.Handle)
	}
	if logger == nil {
		logger = slog.Default()
	}
	logger = logger.With("component", "outbox.relay")
	if subscriber != DefaultSubscriber {
		logger = logger.With("subscriber", subscriber)
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	own, err := store.OpenRelay(cfg.ClaimSize)
	if err != nil {
		return nil, fmt.Errorf("outbox: %w", err)
	}
	listener, _ := own.(Listener)
	runCtx, abandon := context.WithCancel(context.Background())
	claimsCut, cutClaims := context.WithCancel(context.Background())
	r := &Relay{
		store:      own,
		m:          metricsFor(store.Table()),
		listener:   listener,
		cfg:        cfg,
		subscriber: subscriber,
		subs:       byTag,
		logger:     logger,
		now:        now,
		nudge:      make(chan struct{}, 1),
		broadcast:  make(chan struct{}, 1),
		freed:      make(chan struct{}, 1),
		queue:      make(chan job, cfg.workers()),
		held:       make(map[uuid.UUID]job),
		stopping:   make(chan struct{}),
		done:       make(chan struct{}),
		listenDone: make(chan struct{}),
		runCtx:     runCtx,
		abandon:    abandon,
		claimsCut:  claimsCut,
		cutClaims:  cutClaims,
	}
	r.attempts = &attemptLog{logger: r.logger}
	r.lowest.Store(noFloor)
	r.settler = newSettler(r)
	if limit := cfg.Lease - LeaseMargin(cfg.Lease); cfg.HandlerTimeout > limit {
		// Accepted (the contract's rule holds), but not as asked: the settle
		// needs its part of the lease.
		r.logger.Warn("outbox handler timeout leaves less than a fifth of the lease for the claim and the settle; dispatches are cut off sooner",
			"handler_timeout", cfg.HandlerTimeout, "lease", cfg.Lease, "cut_off_after", limit)
	}
	return r, nil
}

// Start runs the relay in the background until Stop: a first claim at once, then
// whenever rows may be waiting. It fails if the relay was started before.
func (r *Relay) Start(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started {
		return errors.New("outbox: relay already started")
	}
	select {
	case <-r.stopping:
		return errors.New("outbox: relay already stopped")
	default:
	}
	r.started = true
	for range r.cfg.workers() {
		go r.worker()
	}
	go r.settler.run()
	go r.loop()
	if r.notifies() {
		go r.listen(r.runCtx)
	} else {
		close(r.listenDone)
	}
	return nil
}

// Stop stops claiming, lets in-flight dispatches finish until ctx ends, then
// abandons them, settles every outcome still waiting and releases every claim
// it did not settle (fenced by the claim token) so another relay can take those
// rows at once. Part of ctx's time (a fifth, at most 2s) is kept for the
// release. It returns by ctx's deadline whatever the database does (down,
// or unreachable with its packets dropped). Calling Stop again, or before
// Start, is harmless. It fails only when a claim could not be settled or
// released; such a row is reclaimed when its lease runs out, never lost. Last,
// it closes the relay's own connections (waiting for them no longer than ctx).
func (r *Relay) Stop(ctx context.Context) error {
	first := false
	r.stopOnce.Do(func() { close(r.stopping); first = true })
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if !first {
		return nil
	}
	// Last, once the claims are cut and the settler is done with it.
	defer r.store.Close(ctx)
	defer r.attempts.flush() // the count of the last window, before Stop returns
	defer r.cutClaims()
	defer context.AfterFunc(ctx, r.cutClaims)()
	if !started {
		r.abandon()
		return r.settler.close(ctx, false)
	}

	grace, cancel := graceContext(ctx)
	defer cancel()
	drained := make(chan struct{})
	go func() {
		<-r.done // the loop claims nothing more, so the wait group only shrinks
		r.inflight.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-grace.Done():
		// Out of time: cancel the handlers. Each abandoned dispatch reports a
		// release; the settler releases the rows the workers never got to.
		r.abandon()
		bound := time.NewTimer(releaseBudget(ctx))
		defer bound.Stop()
		select {
		case <-drained:
		case <-bound.C:
			r.logger.Warn("outbox relay did not stop within its bound; releasing its claims anyway")
		}
	}
	r.abandon()
	select {
	case <-r.listenDone:
	case <-ctx.Done(): // its connection's goodbye is not worth the deadline
	}
	select {
	case <-r.done:
		close(r.queue) // the loop was its only sender; idle workers exit
	default:
	}
	return r.settler.close(ctx, true)
}

// graceContext is ctx shortened by the time Stop keeps for releasing claims.
func graceContext(ctx context.Context) (context.Context, context.CancelFunc) {
	deadline, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, deadline.Add(-releaseBudget(ctx)))
}

func releaseBudget(ctx context.Context) time.Duration {
	deadline, ok := ctx.Deadline()
	if !ok {
		return stopReserve
	}
	return min(stopReserve, max(time.Until(deadline)/5, 10*time.Millisecond))
}

// Nudge wakes the relay at once and, with Config.Notify, every other relay on the
// table (the appending commit must be done). It never blocks.
func (r *Relay) Nudge() {
	signal(r.nudge)
	if r.notifies() {
		signal(r.broadcast)
	}
}

// notifies reports whether relays wake each other: Config.Notify on a dialect
// that can (PostgreSQL). On SQLite it has no effect: a relay of another process
// finds a row at its next poll.
func (r *Relay) notifies() bool { return r.cfg.Notify && r.listener != nil }

// noFloor is the value of Relay.lowest when no requeue is waiting.
const noFloor = math.MaxInt64

// lowerFloor makes the loop's next claim scan from ms up (rows requeued there)
// and wakes it.
func (r *Relay) lowerFloor(ms int64) {
	for {
		cur := r.lowest.Load()
		if ms >= cur || r.lowest.CompareAndSwap(cur, ms) {
			break
		}
	}
	r.wake()
}

// wake wakes this relay only.
func (r *Relay) wake() { signal(r.nudge) }

func (r *Relay) free() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.cfg.workers() - r.busy
}

// loop claims until Stop. After a claim that got all it asked for, it claims
// again as soon as half a claim's worth of slots (or half the workers, if
// fewer) is free; after one that got less, it waits
// for the poll interval, a Nudge or a notification (and a free slot); after a
// failed claim, for a wait that doubles from the poll interval up to its cap.
func (r *Relay) loop() {
	defer close(r.done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	floor := scanFloor{every: sweepInterval(r.cfg.PollInterval)}
	failures := 0
	more := false // the last claim got all it asked for: rows are probably waiting
	for {
		if !more {
			select {
			case <-r.stopping:
				return
			case <-timer.C:
			case <-r.nudge:
			}
		}
		need := 1
		if more {
			// One claim per freed slot would be a statement per row, so wait
			// for half a claim; but never for more slots than there can ever
			// be free at once (Workers < ClaimSize/2 would wait for ever).
			need = max(1, min(r.cfg.ClaimSize, r.cfg.workers())/2)
		}
		for r.free() < need {
			select {
			case <-r.stopping:
				return
			case <-r.freed:
			}
		}
		select {
		case <-r.stopping:
			return
		default:
		}
		limit := min(r.free(), r.cfg.ClaimSize)
		if ms := r.lowest.Swap(noFloor); ms != noFloor {
			floor.lower(ms)
		}
		got, err := r.tick(limit, floor.next(time.Now()))
		more = false
		switch {
		case err != nil:
			failures++
			r.m.ticksFailed.Inc()
			wait := r.tickBackoff(failures)
			// Logged on the change of state only: a database that is down for an
			// hour must not write a line per tick.
			if failures == 1 {
				r.logger.Warn("outbox relay tick failed; backing off until the database answers",
					"err", err, "retry_in", wait)
			} else {
				r.logger.Debug("outbox relay tick failed", "err", err, "failures", failures, "retry_in", wait)
			}
			timer.Reset(wait)
		default:
			if failures > 0 {
				r.logger.Info("outbox relay recovered", "failed_ticks", failures)
				failures = 0
			}
			floor.advance(got, limit)
			if got.taken >= limit {
				more = true
			} else {
				timer.Reset(r.cfg.PollInterval)
			}
		}
	}
}

// tick claims up to limit rows from floor up and queues them for the workers.
func (r *Relay) tick(limit int, floor int64) (claimed, error) {
	got, err := r.claim(r.runCtx, limit, floor)
	if err != nil || len(got.jobs) == 0 {
		return got, err
	}
	if err := r.afterClaim(got.jobs); err != nil {
		return got, err
	}
	r.mu.Lock()
	r.busy += len(got.jobs)
	r.mu.Unlock()
	r.inflight.Add(len(got.jobs))
	for _, j := range got.jobs {
		r.queue <- j // never blocks: the queue holds Workers and busy ≤ Workers
	}
	return got, nil
}

// afterClaim passes the after-claim failpoint. Choice: a failure injected there
// releases the rows at once rather than leaving them leased; an "exit" there
// tests the lease instead.
func (r *Relay) afterClaim(jobs []job) error {
	err := failpoint.Inject(failpoint.RelayAfterClaim)
	if err == nil {
		return nil
	}
	releases := make([]outcome, len(jobs))
	for i, j := range jobs {
		releases[i] = r.release(j)
	}
	r.settler.add(releases...)
	return err
}

// RunOnce claims one batch (scanning from the bottom of the pending index),
// dispatches every claimed row concurrently and settles each, returning when
// all are settled. It returns how many rows it claimed for dispatch, and an
// error when the claim failed (no row was dispatched) or a failpoint fired
// after it. If ctx ends during the dispatch, the rows not yet settled are
// released. The background loop does not use it; tests and tools do.
func (r *Relay) RunOnce(ctx context.Context) (claimed int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	got, err := r.claim(ctx, r.cfg.ClaimSize, 0)
	if err != nil {
		return 0, err
	}
	if len(got.jobs) == 0 {
		return 0, r.settler.flushAll(ctx)
	}
	if err := r.afterClaim(got.jobs); err != nil {
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		r.settler.flushAll(flushCtx) //nolint:errcheck // the rows are released at Stop or by their lease
		return len(got.jobs), err
	}
	outcomes := make(chan outcome, len(got.jobs))
	for _, j := range got.jobs {
		go r.execute(ctx, j, func(o outcome) { outcomes <- o }, nil)
	}
	for range got.jobs {
		r.settler.add(<-outcomes)
	}
	// A failed flush keeps its outcomes: the background settler (if started)
	// retries them and Stop settles or releases them.
	flushCtx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if err := r.settler.flushAll(flushCtx); err != nil {
		r.logger.Warn("outbox settle failed; the outcomes wait for the next flush", "err", err)
	}
	return len(got.jobs), nil
}

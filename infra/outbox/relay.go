package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/failpoint"
)

// Config tunes a relay. Claim size × handler timeout must not exceed the lease, so
// a batch whose rows all time out is still settled before its lease runs out.
type Config struct {
	PollInterval       time.Duration // wake period; failed ticks back off from it (doubling, up to 30× it and at most 30s)
	ClaimSize          int           // rows claimed per statement
	HandlerTimeout     time.Duration // bound of one row's dispatch
	Lease              time.Duration // how long a claim is held
	MaxAttempts        int           // attempts before a row gets failed_at
	RetryBase          time.Duration // durable delay after the first failed attempt
	RetryMax           time.Duration // cap of the durable delay
	ProcessedRetention time.Duration // processed rows older than this are deleted

	// Now is the relay's clock (nil means time.Now). Tests move it forward to make
	// a retried row available without waiting for its delay.
	Now func() time.Time
}

const (
	// settleTimeout bounds one settle or release. It runs on a context of its own,
	// not the dispatch's: a dispatch that finished must be recorded even while the
	// relay is being stopped, or it would be delivered again.
	settleTimeout = 5 * time.Second
	// claimTimeout bounds the claim statement. The claim is never cancelled by Stop:
	// a claim cut off after its commit would leave rows leased that nobody knows of.
	claimTimeout = 15 * time.Second
	// maxBackoff caps the wait after failed ticks (also never more than
	// failBackoffFactor × PollInterval, and never less than PollInterval).
	maxBackoff        = 30 * time.Second
	failBackoffFactor = 30
	// maxErrorLen bounds last_error; a handler may return a whole response body.
	maxErrorLen = 2048
	// stopReserve is the most of Stop's time kept for releasing abandoned claims.
	stopReserve = 2 * time.Second
)

// Relay claims pending rows and hands them to their subscribers. Any number of
// relays may run on one table at once, in one process or many, with no leader.
type Relay struct {
	pool   *pgxpool.Pool
	cfg    Config
	subs   map[string][]Handler
	logger *slog.Logger
	now    func() time.Time

	nudge chan struct{} // size 1: a pending wake-up is never lost and Nudge never blocks

	mu      sync.Mutex
	started bool
	claims  map[uuid.UUID]int // claimed and not yet settled: row id -> attempts of the claim

	stopOnce sync.Once
	stopping chan struct{}   // closed by Stop: claim nothing more
	done     chan struct{}   // closed when the loop has returned
	runCtx   context.Context // parent of every dispatch the loop makes
	abandon  context.CancelFunc
}

// NewRelay returns a relay over pool that dispatches to subs. It fails when cfg is
// invalid, naming the values.
func NewRelay(pool *pgxpool.Pool, cfg Config, subs []Subscriber, logger *slog.Logger) (*Relay, error) {
	if pool == nil {
		return nil, errors.New("outbox: relay needs a pool")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
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
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	runCtx, abandon := context.WithCancel(context.Background())
	return &Relay{
		pool:     pool,
		cfg:      cfg,
		subs:     byTag,
		logger:   logger.With("component", "outbox.relay"),
		now:      now,
		nudge:    make(chan struct{}, 1),
		claims:   make(map[uuid.UUID]int),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
		runCtx:   runCtx,
		abandon:  abandon,
	}, nil
}

func (c Config) validate() error {
	var errs []error
	positive := func(name string, ok bool, v any) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s must be positive, got %v", name, v))
		}
	}
	positive("poll interval", c.PollInterval > 0, c.PollInterval)
	positive("claim size", c.ClaimSize > 0, c.ClaimSize)
	positive("handler timeout", c.HandlerTimeout > 0, c.HandlerTimeout)
	positive("lease", c.Lease > 0, c.Lease)
	positive("max attempts", c.MaxAttempts > 0, c.MaxAttempts)
	positive("retry base", c.RetryBase > 0, c.RetryBase)
	positive("processed retention", c.ProcessedRetention > 0, c.ProcessedRetention)
	if len(errs) == 0 {
		if c.RetryMax < c.RetryBase {
			errs = append(errs, fmt.Errorf("retry max (%s) is less than retry base (%s)", c.RetryMax, c.RetryBase))
		}
		// Compared by division: the product of absurd values would overflow.
		if c.HandlerTimeout > c.Lease/time.Duration(c.ClaimSize) {
			errs = append(errs, fmt.Errorf("claim size × handler timeout (%d × %s) exceeds the lease (%s)",
				c.ClaimSize, c.HandlerTimeout, c.Lease))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("outbox: invalid relay config: %w", err)
	}
	return nil
}

// Start runs the relay in the background until Stop: a first tick at once, then
// one every poll interval or Nudge. It fails if the relay was started before.
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
	go r.loop()
	return nil
}

// Stop stops claiming, lets in-flight dispatches finish until ctx ends, then
// abandons them and releases every claim it did not settle (claimed_until = NULL,
// fenced by the claim) so another relay can take those rows at once. Part of ctx's
// time (a fifth, at most 2s) is kept for the release. Calling Stop again, or
// before Start, is harmless. It fails only when a claim could not be released;
// such a row is reclaimed when its lease runs out.
func (r *Relay) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stopping) })
	r.mu.Lock()
	started := r.started
	r.mu.Unlock()
	if !started {
		r.abandon()
		return nil
	}

	grace, cancel := graceContext(ctx)
	defer cancel()
	select {
	case <-r.done:
	case <-grace.Done():
		// Out of time: cancel the handlers. Each abandoned dispatch releases its
		// own row; the release below covers the rows the loop never got to.
		r.abandon()
		bound := time.NewTimer(releaseBudget(ctx))
		defer bound.Stop()
		select {
		case <-r.done:
		case <-bound.C:
			r.logger.Warn("outbox relay did not stop within its bound; releasing its claims anyway")
		}
	}
	return r.releaseAll()
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

// Nudge wakes the relay at once. It never blocks.
func (r *Relay) Nudge() {
	select {
	case r.nudge <- struct{}{}:
	default: // a wake-up is already pending; it will see this row too
	}
}

// loop ticks until Stop. A full batch is followed by another claim at once, an
// empty or partial one by a wait of PollInterval (or a Nudge), a failed tick by
// a wait that doubles from PollInterval up to its cap.
func (r *Relay) loop() {
	defer close(r.done)
	timer := time.NewTimer(0)
	defer timer.Stop()
	failures := 0
	for {
		select {
		case <-r.stopping:
			return
		case <-timer.C:
		case <-r.nudge:
		}
		select {
		case <-r.stopping:
			return
		default:
		}
		n, err := r.runOnce(r.runCtx)
		switch {
		case err != nil:
			failures++
			ticksFailed.Inc()
			wait := r.failBackoff(failures)
			// Logged on the change of state only: a database that is down for an
			// hour must not write a line per tick.
			if failures == 1 {
				r.logger.Warn("outbox relay tick failed; backing off until the database answers",
					"err", err, "retry_in", wait)
			} else {
				r.logger.Debug("outbox relay tick failed", "err", err, "failures", failures, "retry_in", wait)
			}
			timer.Reset(wait)
		case n == r.cfg.ClaimSize:
			r.recovered(&failures)
			timer.Reset(0) // more rows are probably waiting
		default:
			r.recovered(&failures)
			timer.Reset(r.cfg.PollInterval)
		}
	}
}

func (r *Relay) recovered(failures *int) {
	if *failures > 0 {
		r.logger.Info("outbox relay recovered", "failed_ticks", *failures)
		*failures = 0
	}
}

// failBackoff is the wait after the n-th failed tick in a row.
func (r *Relay) failBackoff(n int) time.Duration {
	limit := max(r.cfg.PollInterval, min(maxBackoff, failBackoffFactor*r.cfg.PollInterval))
	d := r.cfg.PollInterval
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// RunOnce claims one batch, dispatches every claimed row concurrently and settles
// each, returning when all are settled. It returns how many rows it claimed, and
// an error when the claim failed (no row was dispatched) or a failpoint fired
// after it. If ctx ends during the dispatch, the rows not yet settled are
// released. The background loop is made of these ticks; tests call it directly.
func (r *Relay) RunOnce(ctx context.Context) (claimed int, err error) {
	return r.runOnce(ctx)
}

func (r *Relay) runOnce(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	msgs, err := r.claim(ctx)
	if err != nil {
		return 0, err
	}
	if len(msgs) == 0 {
		return 0, nil
	}
	// Choice: a failure injected after the claim releases the rows at once rather
	// than leaving them leased; an "exit" there tests the lease instead.
	if err := failpoint.Inject(failpoint.RelayAfterClaim); err != nil {
		for _, m := range msgs {
			r.release(m.ID, m.Attempt)
		}
		return len(msgs), err
	}
	var wg sync.WaitGroup
	for _, m := range msgs {
		wg.Go(func() { r.deliver(ctx, m) })
	}
	wg.Wait()
	return len(msgs), nil
}

// claimSQL claims a batch in one statement. The inner select reads the partial
// index outbox_events_pending_idx (pending rows by created_at), so it costs the
// same however many settled rows the table holds. A claim is reclaimable when its
// lease expired, or when it lies more than twice the lease in the future (a clock
// that ran ahead). SKIP LOCKED lets relays claim side by side without waiting.
// $1 now, $2 now + lease, $3 now + 2 × lease, $4 claim size; epoch ms.
const claimSQL = `
UPDATE outbox_events
SET claimed_until = $2, attempts = attempts + 1
WHERE id IN (
	SELECT id FROM outbox_events
	WHERE processed_at IS NULL AND failed_at IS NULL AND available_at <= $1
		AND (claimed_until IS NULL OR claimed_until < $1 OR claimed_until > $3)
	ORDER BY created_at
	LIMIT $4
	FOR UPDATE SKIP LOCKED
)
RETURNING id, event_tag, payload, created_at, attempts`

func (r *Relay) claim(ctx context.Context) ([]Message, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
	defer cancel()
	now := r.now()
	rows, err := r.pool.Query(ctx, claimSQL,
		now.UnixMilli(), now.Add(r.cfg.Lease).UnixMilli(), now.Add(2*r.cfg.Lease).UnixMilli(), r.cfg.ClaimSize)
	if err != nil {
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	var msgs []Message
	for rows.Next() {
		var m Message
		if err := rows.Scan(&m.ID, &m.Tag, &m.Payload, &m.CreatedAt, &m.Attempt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("outbox: claim: %w", err)
		}
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		// The statement may have committed: the rows it leased are reclaimed when
		// the lease runs out.
		return nil, fmt.Errorf("outbox: claim: %w", err)
	}
	r.mu.Lock()
	for _, m := range msgs {
		r.claims[m.ID] = m.Attempt
	}
	r.mu.Unlock()
	for _, m := range msgs {
		claimedTotal.WithLabelValues(m.Tag).Inc()
	}
	return msgs, nil
}

// deliver dispatches one claimed row and settles the outcome.
func (r *Relay) deliver(ctx context.Context, m Message) {
	start := time.Now()
	err := r.dispatch(ctx, m)
	if err == nil {
		// A failure injected here is a failed attempt, as a lost settle would be.
		err = failpoint.Inject(failpoint.RelayAfterDispatch)
	}
	if err != nil && ctx.Err() != nil {
		// Abandoned by Stop (or the caller of RunOnce), not failed: give the row
		// back without spending an attempt's delay on it.
		dispatchSeconds.WithLabelValues(m.Tag, "abandoned").Observe(time.Since(start).Seconds())
		r.release(m.ID, m.Attempt)
		return
	}
	outcome := "ok"
	if err != nil {
		outcome = "error"
	}
	dispatchSeconds.WithLabelValues(m.Tag, outcome).Observe(time.Since(start).Seconds())
	r.settle(m, err)
}

// dispatch runs the row's handlers in order under the handler timeout. A panic is
// recovered into an error. The handlers run in a goroutine of their own so that
// one that ignores its context still cannot hold the row past the timeout.
func (r *Relay) dispatch(ctx context.Context, m Message) error {
	handlers := r.subs[m.Tag]
	if len(handlers) == 0 {
		// Retried normally: the subscriber may arrive with the next deploy.
		return fmt.Errorf("no subscriber for tag %s", m.Tag)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, r.cfg.HandlerTimeout)
	defer cancel()
	result := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				r.logger.Error("outbox handler panicked", "id", m.ID, "tag", m.Tag,
					"panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				result <- fmt.Errorf("panic in %s handler: %v", m.Tag, p)
			}
		}()
		for _, h := range handlers {
			if err := h(ctx, m); err != nil {
				result <- err
				return
			}
		}
		result <- nil
	}()
	select {
	case err := <-result:
		return err
	case <-ctx.Done():
		return fmt.Errorf("%s handler: %w", m.Tag, ctx.Err())
	}
}

// The settle statements are fenced by the claim: they touch the row only while
// it is still the claim this relay made (same attempts, neither processed nor
// failed). A relay whose lease ran out and whose row was reclaimed elsewhere thus
// changes nothing, and the newer claim's outcome stands.
const (
	settleProcessedSQL = `
UPDATE outbox_events SET processed_at = $3, claimed_until = NULL
WHERE id = $1 AND attempts = $2 AND processed_at IS NULL AND failed_at IS NULL`
	settleRetrySQL = `
UPDATE outbox_events SET available_at = $3, last_error = $4, claimed_until = NULL
WHERE id = $1 AND attempts = $2 AND processed_at IS NULL AND failed_at IS NULL`
	settleFailedSQL = `
UPDATE outbox_events SET failed_at = $3, last_error = $4, claimed_until = NULL
WHERE id = $1 AND attempts = $2 AND processed_at IS NULL AND failed_at IS NULL`
	releaseSQL = `
UPDATE outbox_events SET claimed_until = NULL
WHERE id = $1 AND attempts = $2 AND processed_at IS NULL AND failed_at IS NULL`
)

// settle records the outcome of one dispatch. If the database cannot be reached
// the row stays leased and is delivered again after its lease: at least once.
func (r *Relay) settle(m Message, dispatchErr error) {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	defer r.forget(m.ID, m.Attempt)

	now := r.now()
	var (
		sql  string
		args []any
		kind string
	)
	switch {
	case dispatchErr == nil:
		kind, sql, args = "processed", settleProcessedSQL, []any{m.ID, m.Attempt, now.UnixMilli()}
	case IsPermanent(dispatchErr) || m.Attempt >= r.cfg.MaxAttempts:
		kind, sql, args = "failed", settleFailedSQL, []any{m.ID, m.Attempt, now.UnixMilli(), errorText(dispatchErr)}
	default:
		delay := durableDelay(m.Attempt, r.cfg.RetryBase, r.cfg.RetryMax)
		kind, sql, args = "retry", settleRetrySQL, []any{m.ID, m.Attempt, now.Add(delay).UnixMilli(), errorText(dispatchErr)}
	}
	tag, err := r.pool.Exec(ctx, sql, args...)
	if err != nil {
		r.logger.Warn("outbox settle failed; the row is delivered again after its lease",
			"id", m.ID, "tag", m.Tag, "attempt", m.Attempt, "outcome", kind, "err", err)
		return
	}
	if tag.RowsAffected() == 0 {
		fencedTotal.WithLabelValues(m.Tag).Inc()
		r.logger.Info("outbox settle fenced off: the row was reclaimed elsewhere",
			"id", m.ID, "tag", m.Tag, "attempt", m.Attempt, "outcome", kind)
		return
	}
	switch kind {
	case "processed":
		processedTotal.WithLabelValues(m.Tag).Inc()
	case "failed":
		deadTotal.WithLabelValues(m.Tag).Inc()
		r.logger.Warn("outbox row failed: dead-lettered until an operator requeues or deletes it",
			"id", m.ID, "tag", m.Tag, "attempts", m.Attempt, "permanent", IsPermanent(dispatchErr), "err", dispatchErr)
	case "retry":
		retriedTotal.WithLabelValues(m.Tag).Inc()
		r.logger.Debug("outbox row will be retried", "id", m.ID, "tag", m.Tag, "attempt", m.Attempt, "err", dispatchErr)
	}
}

// release gives an unsettled claim back (claimed_until = NULL, fenced) so that
// any relay can take the row at once. The attempt stays counted.
func (r *Relay) release(id uuid.UUID, attempts int) error {
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if _, err := r.pool.Exec(ctx, releaseSQL, id, attempts); err != nil {
		r.logger.Warn("outbox release failed; the row is reclaimed after its lease", "id", id, "err", err)
		return fmt.Errorf("outbox: release %s: %w", id, err)
	}
	r.forget(id, attempts)
	return nil
}

// releaseAll releases every claim this relay made and has not settled.
func (r *Relay) releaseAll() error {
	r.mu.Lock()
	pending := make(map[uuid.UUID]int, len(r.claims))
	for id, a := range r.claims {
		pending[id] = a
	}
	r.mu.Unlock()
	var errs []error
	for id, a := range pending {
		if err := r.release(id, a); err != nil {
			errs = append(errs, err)
		}
	}
	if len(pending) > 0 {
		r.logger.Info("outbox relay released unsettled claims", "rows", len(pending), "failed", len(errs))
	}
	return errors.Join(errs...)
}

func (r *Relay) forget(id uuid.UUID, attempts int) {
	r.mu.Lock()
	if r.claims[id] == attempts {
		delete(r.claims, id)
	}
	r.mu.Unlock()
}

// durableDelay is the wait before attempt n+1 after attempt n failed: d = base ×
// 2^(n-1), with "equal jitter" (d/2 plus a random part up to d/2), capped at max.
// The jittered ranges of successive attempts do not overlap, so the delay never
// shrinks from one attempt to the next.
func durableDelay(attempt int, base, maxDelay time.Duration) time.Duration {
	d := base
	for i := 1; i < attempt && d < 2*maxDelay; i++ {
		d *= 2
	}
	half := d / 2
	return min(half+time.Duration(rand.Int64N(int64(d-half)+1)), maxDelay)
}

// errorText is err as stored in last_error: bounded, valid UTF-8, and free of NUL
// bytes (which a text column refuses, and the settle would fail with it).
func errorText(err error) string {
	s := strings.ReplaceAll(err.Error(), "\x00", "")
	if len(s) > maxErrorLen {
		cut := maxErrorLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut-- // never split a rune
		}
		s = s[:cut] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

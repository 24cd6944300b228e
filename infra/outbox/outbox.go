// Package outbox keeps the promise the whole project stands on: a fact written with
// a change is never lost. A use case appends an event to outbox_events in the same
// transaction as its change; a relay (any number of them, no leader) claims
// pending rows under a lease (FOR UPDATE SKIP LOCKED on PostgreSQL; on SQLite,
// whose one writer serialises the claims, the same statement without it), hands
// each to the subscribers of its tag, and settles it: processed, retried after a
// durable backoff, or dead-lettered (failed_at) after the last attempt. Delivery
// is at least once and in no particular order; subscribers make their effects
// idempotent with the row id, which is every consumer's dedup key.
package outbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
)

// Event is a domain fact that travels through the outbox. Its JSON encoding is its
// payload; the payload evolves additively, and a breaking change is a new tag.
type Event interface {
	// EventTag names the event's type, e.g. "RuleActivated".
	EventTag() string
}

// Append inserts event as a pending outbox row inside tx, through store (the
// outbox store of tx's dialect: TX is the dialect's executor, so another
// dialect's transaction does not compile), and returns the row's id, a fresh UUIDv7. It is
// atomic with the caller's transaction: the row exists if and only if tx
// commits. It is a plain INSERT with no ON CONFLICT: every call is a new fact.
// After the commit, call Nudge so the local relay delivers at once. When ctx
// holds a valid span (a traced request), the row also stores its W3C trace
// context, and the relay's dispatch of the row links to it.
//
// With fan-out (a store built WithRoutes), the returned id is the event's:
// it is the default subscriber's row id, and each further subscriber of the
// tag gets a row of its own (a fresh id, event_id = this id) in the same
// statement. Every subscriber receives this id as Message.ID.
func Append[TX any](ctx context.Context, store Appender[TX], tx TX, event Event) (uuid.UUID, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.Nil, fmt.Errorf("outbox: new id: %w", err)
	}
	payload, err := json.Marshal(event)
	if err != nil {
		return uuid.Nil, fmt.Errorf("outbox: encode %s: %w", event.EventTag(), err)
	}
	row := NewRow{ID: id, Tag: event.EventTag(), Payload: payload, CreatedAt: time.Now().UnixMilli(), Trace: traceContext(ctx)}
	if r, ok := store.(router); ok {
		for _, sub := range r.subscribersOf(row.Tag) {
			rowID, err := uuid.NewV7()
			if err != nil {
				return uuid.Nil, fmt.Errorf("outbox: new id: %w", err)
			}
			row.Deliveries = append(row.Deliveries, Delivery{ID: rowID, Subscriber: sub})
		}
	}
	if err := store.Append(ctx, tx, row); err != nil {
		return uuid.Nil, fmt.Errorf("outbox: append %s: %w", event.EventTag(), err)
	}
	appended := metricsFor(store.Table()).appended
	appended.WithLabelValues(row.Tag, DefaultSubscriber).Inc()
	for _, d := range row.Deliveries {
		appended.WithLabelValues(row.Tag, d.Subscriber).Inc()
	}
	return id, nil
}

// CountAppended counts n rows of tag appended to table by a statement of the
// caller's own instead of Append: a set-based insert written into a larger
// statement, such as billing's apply, which inserts its QuotaChanged rows in
// the one statement of its receipts and its change. The rows must be what
// Append writes (a fresh UUIDv7 id, the tag, the JSON payload, created_at and
// available_at the same epoch ms, no attempt). Call it after the commit, with
// the rows that committed, and Nudge the relay as after Append: the relay's
// TABLE_events_appended_total then counts them as it counts Append's. table
// is checked as WithTable's is.
func CountAppended(table, tag string, n int) {
	if n > 0 {
		metricsFor(tableOf([]StoreOption{WithTable(table)})).appended.WithLabelValues(tag, DefaultSubscriber).Add(float64(n))
	}
}

// Nudger wakes a relay at once instead of at its next poll. Use cases call Nudge
// after their transaction commits; it never blocks and never fails.
type Nudger interface {
	Nudge()
}

// Message is one claimed row as a subscriber sees it.
type Message struct {
	ID        uuid.UUID       // the event's id (Append's; every subscriber of the event gets the same): the consumer's dedup key
	Tag       string          // the event tag
	Payload   json.RawMessage // the event encoded as JSON
	CreatedAt int64           // epoch ms of the append
	Attempt   int             // 1 on the first delivery
}

// Handler handles one message. A nil error settles the row as processed; an error
// wrapped with Permanent fails it at once; an error wrapped with Wait makes the
// row wait without spending an attempt; any other error (or a panic, or the
// handler timeout) is a failed attempt retried after the durable delay.
type Handler func(ctx context.Context, m Message) error

// Subscriber is one handler of one tag.
type Subscriber struct {
	Tag    string
	Handle Handler
}

// Subscribe returns a subscriber of E's tag that decodes each payload into E (and,
// if E has a Validate() error method, validates it) before calling fn. A payload
// that does not decode or validate fails the row at once: retrying cannot fix it.
func Subscribe[E Event](fn func(ctx context.Context, m Message, event E) error) Subscriber {
	var zero E
	return Subscriber{
		Tag: zero.EventTag(),
		Handle: func(ctx context.Context, m Message) error {
			var e E
			// The relay holds only the row's bytes (Append's value ended with
			// its transaction, perhaps in another process), so checking them
			// means decoding them.
			if err := json.Unmarshal(m.Payload, &e); err != nil {
				return Permanent(fmt.Errorf("decode %s payload: %w", m.Tag, err))
			}
			if v, ok := any(e).(interface{ Validate() error }); ok {
				if err := v.Validate(); err != nil {
					return Permanent(fmt.Errorf("invalid %s payload: %w", m.Tag, err))
				}
			}
			return fn(ctx, m, e)
		},
	}
}

// permanentError marks a failure that no retry can fix.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Permanent marks err as one no retry can fix: the relay sets failed_at at once.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err: err}
}

// IsPermanent reports whether err was marked with Permanent.
func IsPermanent(err error) bool {
	var p *permanentError
	return errors.As(err, &p)
}

// retryAfterError asks for the next attempt no sooner than after.
type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// RetryAfter marks err as a failed attempt whose next attempt must wait at
// least d (a consumer's Retry-After): the relay delays the row by the larger
// of d and its own backoff, capped at Config.RetryMax, so a consumer cannot
// hold a row back longer than the relay's longest delay, and asking for less
// than the backoff never hurries a retry. The attempt still counts: the last
// one dead-letters the row as any failure does, and an error also marked
// Permanent fails the row at once. A d that is not positive leaves the
// backoff as it is.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err: err, after: d}
}

// RetryAfterOf reports the wait err asks for through RetryAfter, if any.
func RetryAfterOf(err error) (time.Duration, bool) {
	var r *retryAfterError
	if errors.As(err, &r) {
		return r.after, true
	}
	return 0, false
}

// waitError asks for the row to wait, not to count a failed attempt.
type waitError struct {
	err error
	d   time.Duration
}

func (e *waitError) Error() string { return e.err.Error() }
func (e *waitError) Unwrap() error { return e.err }

// Wait marks err as a wait, not a failure: the row is not ready to be
// delivered yet, for a reason with a known end that retrying sooner cannot
// change (a broker's duplicate window that must pass before the row's message
// can be stored anew). The relay makes the row available again d from now,
// records err as its last_error, and gives back the attempt its claim took:
// the row's attempts are what they were before that claim, so no number of
// waits dead-letters it, whatever OUTBOX_MAX_ATTEMPTS and the retry delays
// are. d is the subscriber's to choose and is not capped by Config.RetryMax
// (a wait that must outlast it would otherwise come back early and wait
// again); a d that is not positive makes the row available at once. Like every
// settle, the wait is fenced by the claim's token. An error also marked
// Permanent fails the row at once; Wait wins over RetryAfter.
//
// A wait is only for a row whose delivery is known not to have been acted on
// as a failure: a subscriber that cannot tell a wait from a failure returns
// an ordinary error, which counts.
func Wait(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &waitError{err: err, d: d}
}

// WaitOf reports the wait err asks for through Wait, if any.
func WaitOf(err error) (time.Duration, bool) {
	var w *waitError
	if errors.As(err, &w) {
		return w.d, true
	}
	return 0, false
}

package billing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/telemetry"
)

// tracerName is the instrumentation scope of billing's spans.
const tracerName = "github.com/acme/outboxpair/billing"

// Contention retries: a serialization failure or a deadlock is the database asking
// for the whole transaction again, which is safe because the receipt and the change
// commit together or not at all. Anything else goes back to the sender, whose
// durable retry is the one that survives a crash.
const (
	maxAttempts = 5
	retryPause  = 5 * time.Millisecond // first pause; it doubles, with jitter
)

// DefaultApplyGroupMax is the group size a Service uses when none is given
// (BILLING_APPLY_GROUP_MAX's default), above the deliveries one relay keeps in
// flight (outbox.DefaultWorkers), so that a relay's concurrent deliveries fit
// one transaction; MaxApplyGroupMax is the largest Config.Validate accepts.
const (
	DefaultApplyGroupMax = 100
	MaxApplyGroupMax     = 1000
)

// DefaultReceiptsRetention is how long a receipt is kept when not set
// otherwise (RECEIPTS_RETENTION's default).
const DefaultReceiptsRetention = 720 * time.Hour

// Service applies delivered events and answers quota reads.
type Service struct {
	db       sqldb.DB
	store    Store  // the statements that run on their own
	run      runner // a transaction and the statements bound to it
	logger   *slog.Logger
	groupMax int                     // events applied in one transaction at most; 1: one transaction per event
	handlers map[string]EventHandler // by type: the only types Decode and Apply accept
	maxAge   time.Duration           // Decode refuses an event older than this; 0: no bound

	mu    sync.Mutex
	busy  bool        // a group transaction is in flight (its leader will hand off)
	queue []*applyReq // deliveries waiting for the next group, in arrival order
}

// Option changes how a Service applies events.
type Option func(*Service)

// ApplyGroupMax bounds how many concurrent deliveries Apply puts in one
// transaction (group apply); 1 turns grouping off, so that every delivery runs
// its own transaction. A value below 1 keeps the default.
func ApplyGroupMax(n int) Option {
	return func(s *Service) {
		if n >= 1 {
			s.groupMax = n
		}
	}
}

// LateMargin is how much younger than RECEIPTS_RETENTION an event must be to be
// applied: a tenth of the retention. The retention deletes a receipt no sooner
// than RECEIPTS_RETENTION after billing received its event, and billing
// received it no sooner than it occurred; so an event younger than the
// retention still has its receipt if it was ever applied. The margin covers what
// that argument leaves out: the two services' clocks may disagree (occurredAt is
// labeling's), and the apply commits some time after the check (a group waits,
// a transaction retries). A tenth is 72h at the default 720h: far beyond any
// skew or commit delay, and still leaves an operator 27 days to requeue.
func LateMargin(retention time.Duration) time.Duration { return retention / 10 }

// RefuseOlderThan makes Decode refuse, with fault.Invalid and the reason
// "event_too_old", any event whose occurredAt is older than retention less
// LateMargin: it could be a duplicate whose receipt retention has deleted, so
// applying it could apply it twice (issue 25). Zero or less keeps no bound.
func RefuseOlderThan(retention time.Duration) Option {
	return func(s *Service) {
		if retention > 0 {
			s.maxAge = retention - LateMargin(retention)
		}
	}
}

// Handling makes the Service apply exactly the event types of handlers, in
// place of Events: how a test adds a type of its own as docs/events.md adds
// one, without a second registry in the code.
func Handling(handlers ...EventHandler) Option {
	return func(s *Service) { s.handlers = registry(handlers) }
}

// NewService returns the billing use cases over db (with the store of its
// dialect), applying the events of Events, with group apply at
// DefaultApplyGroupMax unless opts say otherwise. It panics when two handlers
// share a type or one has no type: a defect that must not pick a winner.
func NewService(db sqldb.DB, logger *slog.Logger, opts ...Option) *Service {
	d := database.Pick(db, dialects)
	s := &Service{db: db, store: d.store, run: d.run, logger: logger, groupMax: DefaultApplyGroupMax}
	for _, o := range opts {
		o(s)
	}
	if s.handlers == nil {
		s.handlers = registry(Events())
	}
	return s
}

// registry indexes handlers by type.
func registry(handlers []EventHandler) map[string]EventHandler {
	byType := make(map[string]EventHandler, len(handlers))
	for _, h := range handlers {
		if h.typ == "" || h.effect == nil {
			panic("billing: a handler without a type; build it with Handle")
		}
		if _, dup := byType[h.typ]; dup {
			panic(fmt.Sprintf("billing: two handlers for event type %q", h.typ))
		}
		byType[h.typ] = h
	}
	return byType
}

// Decode turns a delivered event into the Event to apply, through its type's
// handler: a type without one is a fault.NotImplemented (nothing is applied, and
// the sender retries it until billing has one), a payload the handler refuses a
// fault.Invalid, an event older than the RefuseOlderThan bound a fault.Invalid
// with the reason "event_too_old" (never applied: its receipt may be gone). It
// writes nothing, so a delivery is answered before it joins a group.
func (s *Service) Decode(id uuid.UUID, typ string, occurredAt int64, payload json.RawMessage) (Event, error) {
	if s.maxAge > 0 {
		if age := time.Since(time.UnixMilli(occurredAt)); age > s.maxAge {
			return Event{}, &fault.Error{Code: fault.Invalid, Reason: "event_too_old", Message: fmt.Sprintf(
				"event too old: occurredAt is %s ago, past RECEIPTS_RETENTION less its margin (%s): its receipt may be deleted, so it is never applied",
				age.Truncate(time.Second), s.maxAge)}
		}
	}
	h, ok := s.handlers[typ]
	if !ok {
		return Event{}, notHandled(typ)
	}
	eff, err := h.effect(payload)
	if err != nil {
		return Event{}, err
	}
	return Event{ID: id, Type: typ, OccurredAt: occurredAt, OrgID: eff.OrgID, Delta: eff.Delta}, nil
}

// decode checks a delivery's envelope, then Decodes it.
func (s *Service) decode(env Envelope) (Event, error) {
	id, typ, err := env.Header()
	if err != nil {
		return Event{}, err
	}
	return s.Decode(id, typ, *env.OccurredAt, env.Payload)
}

// handles reports whether s has a handler for typ.
func (s *Service) handles(typ string) bool {
	_, ok := s.handlers[typ]
	return ok
}

func notHandled(typ string) error {
	return fault.Errorf(fault.NotImplemented, "event type %q is not handled by billing", clip(typ, 64))
}

// Apply applies e once, however often it is delivered. In ONE transaction it
// inserts e's receipt and, only if the receipt is new, adds e.Delta to e.OrgID's
// active rules; it reports applied=false when the receipt already existed (a
// redelivery, which changes nothing and is a success). It returns only after the
// commit, so a caller that answers success after it never acknowledges an
// uncommitted change; a failure at any point before the commit leaves neither the
// receipt nor the change. An event whose type has no handler is refused with
// fault.NotImplemented before anything is written: no type has a default effect.
// Other errors are *fault.Error: Unavailable when the database is down,
// contention outlasted the retries or ctx ended first, Internal otherwise.
//
// Concurrent calls are grouped (see group.go): a call that finds no transaction
// in flight commits at once, alone; calls that arrive while one is in flight are
// applied together in the next one, each still with its own receipt and its own
// result. A group that fails for a reason other than an unavailable database is
// retried member by member, so one event that cannot be applied fails only its
// own call.
func (s *Service) Apply(ctx context.Context, e Event) (applied bool, err error) {
	if !s.handles(e.Type) {
		return false, notHandled(e.Type)
	}
	if telemetry.Enabled() {
		var span trace.Span
		ctx, span = telemetry.Tracer(tracerName).Start(ctx, "billing apply "+e.Type,
			trace.WithAttributes(attribute.String("messaging.message.id", e.ID.String()),
				attribute.String("billing.org_id", e.OrgID.String())))
		defer func() {
			span.SetAttributes(attribute.Bool("billing.applied", applied))
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, "apply failed")
			}
			span.End()
		}()
	}
	if s.groupMax <= 1 {
		return s.applyAlone(ctx, e)
	}
	return s.applyGrouped(ctx, e)
}

// applyAlone applies e in a transaction of its own.
func (s *Service) applyAlone(ctx context.Context, e Event) (bool, error) {
	groupSizes.Observe(1)
	fresh, err := s.commit(ctx, []Event{e})
	if err != nil {
		return false, err
	}
	return fresh[e.ID], nil
}

// commit applies events (distinct ids) in one transaction, retrying it on
// contention, and returns the ids it applied. Errors are classified.
func (s *Service) commit(ctx context.Context, events []Event) (map[uuid.UUID]bool, error) {
	for attempt := 1; ; attempt++ {
		fresh, err := s.applyOnce(ctx, events)
		if err == nil {
			return fresh, nil
		}
		if !s.db.Contention(err) {
			return nil, s.classify(err)
		}
		if attempt == maxAttempts {
			return nil, fault.Wrap(fault.Unavailable, err, "database busy, retry later")
		}
		contentionRetries.Inc()
		if err := pause(ctx, attempt); err != nil {
			return nil, s.classify(err)
		}
	}
}

// applyOnce applies events. In a normal build it runs as its own
// transaction, Store.ApplyOwn (on PostgreSQL one statement on the pool: one round trip),
// committed when it returns, and a crash before its answer leaves either the whole group or
// none of it. A failpoints build wraps it in an explicit transaction so that
// billing.events.before-commit has a place between the writes and the commit.
func (s *Service) applyOnce(ctx context.Context, events []Event) (map[uuid.UUID]bool, error) {
	now := time.Now().UnixMilli()
	if !failpoint.Enabled {
		return s.store.ApplyOwn(ctx, events, now)
	}
	var fresh map[uuid.UUID]bool
	err := s.run(ctx, sqldb.TxOptions{}, func(tx billingTx) error {
		var err error
		if fresh, err = tx.Apply(ctx, events, now); err != nil {
			return err
		}
		return failpoint.Inject(failpoint.BillingEventsBeforeCommit)
	})
	if err != nil {
		return nil, err
	}
	return fresh, nil
}

// Quota returns org's quota; an org no event has touched has 0 active rules.
func (s *Service) Quota(ctx context.Context, org uuid.UUID) (Quota, error) {
	var n int64
	err := s.run(ctx, sqldb.TxOptions{ReadOnly: true}, func(tx billingTx) error {
		var err error
		n, err = tx.ActiveRules(ctx, org)
		return err
	})
	if err != nil {
		return Quota{}, s.classify(err)
	}
	return Quota{OrgID: org, ActiveRules: n}, nil
}

// classify gives err the code the sender acts on: 503 (retry later) when the
// database could not be reached or the request ended first, 500 otherwise. The
// cause is logged by the HTTP layer, never shown.
func (s *Service) classify(err error) error {
	switch {
	case s.db.Unavailable(err):
		return fault.Wrap(fault.Unavailable, err, "database unavailable")
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return fault.Wrap(fault.Unavailable, err, "request ended before the database answered")
	default:
		return fault.Wrap(fault.Internal, err, "internal error")
	}
}

// pause waits a jittered, doubling delay before contention retry attempt+1.
func pause(ctx context.Context, attempt int) error {
	d := retryPause << (attempt - 1)
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Package inbox is the consumer half of the transactional outbox, the mirror
// of infra/outbox: it applies each delivered event exactly once in effect.
//
// The guarantee: an event's effect commits in the same transaction as its
// receipt, keyed by the event id, or neither commits. The inbox inserts the
// receipts first and hands the slice's effect only the events whose receipt
// is new, inside that transaction, so a redelivery finds its receipt and
// applies nothing, and a crash or an error at any point before the commit
// leaves neither the receipt nor the effect. An effect is never given a way
// to run outside the transaction: it is a Go function of the transaction
// (EffectFunc, the same on both dialects), or, on PostgreSQL's fast path, a
// statement the inbox embeds in the one statement that inserts the receipts.
//
// A slice brings a Consumer: its handlers (event type → decoded value), its
// effect on its own tables, its receipts table and its NATS
// dead-letter table. The inbox brings the rest, written once for both
// dialects: group apply (concurrent deliveries in one transaction), the
// contention retry, the HTTP intake (Intake), the NATS JetStream handler with
// its signature checks, dead-letter records and their bound (NATSHandler),
// the replay of those records (Replay), the refusal of late deliveries
// (RefuseOlderThan) and the receipts' retention (Retention).
//
// This package is the stable Go surface a team builds its own consumer on
// (CONTRACT.md, docs/adopting.md, docs/events.md).
package inbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/infra/wire"
)

// tracerName is the instrumentation scope of the inbox's spans.
const tracerName = "github.com/acme/outboxpair/infra/inbox"

// Contention retries: a serialization failure or a deadlock is the database
// asking for the whole transaction again, which is safe because the receipts
// and the effect commit together or not at all. Anything else goes back to the
// sender, whose durable retry is the one that survives a crash.
const (
	maxAttempts = 5
	retryPause  = 5 * time.Millisecond // first pause; it doubles, with jitter
)

// DefaultGroupMax is the group size an Inbox uses when none is given, above
// the deliveries one relay keeps in flight (outbox.DefaultWorkers), so that a
// relay's concurrent deliveries fit one transaction; MaxGroupMax is the
// largest a Config should accept.
const (
	DefaultGroupMax = 100
	MaxGroupMax     = 1000
)

// DefaultReceiptsRetention is how long a receipt is kept when a slice sets
// nothing else: 30 days, longer than any window in which a duplicate arrives.
const DefaultReceiptsRetention = 720 * time.Hour

// Event is a delivered event whose type has a handler, decoded by it: Value
// is what the handler made of the payload, and what the effect applies.
type Event[V any] struct {
	ID         uuid.UUID // the producer's outbox row id: the receipt's key
	Type       string    // a type of the Consumer's Handlers
	OccurredAt int64     // epoch ms of the append at the producer
	Value      V         // the handler's decoding of the payload
}

// Attributer is a Value that names itself on the span of its apply (billing:
// the org), beside the event id.
type Attributer interface {
	Attributes() []attribute.KeyValue
}

// Handler is a consumer's handling of one event type; Handle builds it.
type Handler[V any] struct {
	typ    string
	decode func(payload json.RawMessage) (V, error)
}

// Handle returns the Handler of event type typ. The payload is decoded into P,
// ignoring fields P does not have (payloads grow by new optional fields) and
// matching names exactly; decode checks it and returns the event's Value. A
// payload that does not decode, or that decode refuses, is a fault.Invalid:
// 400 over HTTP, recorded and terminated over NATS, never applied.
func Handle[P, V any](typ string, decode func(P) (V, error)) Handler[V] {
	return Handler[V]{typ: typ, decode: func(raw json.RawMessage) (V, error) {
		var p P
		var zero V
		// A second pass over the payload, after the envelope's: P is known
		// only from the envelope's type, which may follow the payload, and a
		// payload's fault is answered only after the envelope's, the
		// Idempotency-Key's, the age's and the type's (an unhandled type is a
		// 501 whatever its payload), in the order Deliver and Decode check.
		if err := jsonv2.Unmarshal(raw, &p); err != nil {
			return zero, fault.Errorf(fault.Invalid, "payload of %s: %s", typ, decodeProblem(err))
		}
		v, err := decode(p)
		if err != nil {
			return zero, fault.Errorf(fault.Invalid, "payload of %s: %v", typ, err)
		}
		return v, nil
	}}
}

// Type is the event type h handles.
func (h Handler[V]) Type() string { return h.typ }

// decodeProblem says what is wrong with a payload that does not decode, in
// words safe to echo: the field and the JSON kind, never the Go types.
func decodeProblem(err error) string {
	var se *jsonv2.SemanticError
	if errors.As(err, &se) && se.JSONPointer != "" && se.JSONKind != 0 {
		return fmt.Sprintf("%s must not be a JSON %s", wire.Clip(strings.TrimPrefix(string(se.JSONPointer), "/"), 64), se.JSONKind)
	}
	return "not the JSON object its handler reads"
}

// Effect is a consumer's effect on its own tables. The inbox runs it in the
// transaction that inserts the receipts, only for the events whose receipt
// is new there, and commits both together.
//
// Func is the effect most consumers give: one Go function for both dialects.
// Postgres and SQLite, when given, take its place on their dialect: Postgres
// is the opt-in fast path (the effect as part of the inbox's one statement:
// one round trip per group, for a consumer whose drain the measures show
// bound by round trips, as billing's); SQLite is a function of SQLite's own
// executor, for SQL that differs there.
type Effect[V any] struct {
	// Func is called in the transaction after the receipts are inserted
	// (EffectFunc), on each dialect its own field does not take.
	Func EffectFunc[V]
	// Postgres, when its Statements are given, is the effect on PostgreSQL,
	// as part of the inbox's one statement.
	Postgres PostgresEffect[V]
	// SQLite, when given, is the effect on SQLite: called in the transaction
	// after the receipts are inserted, with the events whose receipt is new,
	// in event id order (never empty), and tx, the transaction's executor;
	// now is the receipts' created_at (epoch ms). An error rolls the
	// receipts back with it.
	SQLite func(ctx context.Context, tx sqlite.Tx, fresh []Event[V], now int64) error
}

// fastPath reports whether e's PostgreSQL effect is the one statement.
func (e Effect[V]) fastPath() bool { return len(e.Postgres.Statements) > 0 }

// PostgresEffect is an effect contributed to the inbox's one statement (one
// round trip, one commit, as fast as the statement billing fused by hand
// before the inbox existed):
//
//	WITH inbox_events AS (SELECT * FROM unnest($2::uuid[], $3::T3[], …)
//	                        AS inbox_events (event_id, COLUMNS…)),
//	     inbox_fresh AS (INSERT INTO RECEIPTS … ORDER BY event_id
//	                     ON CONFLICT DO NOTHING RETURNING event_id),
//	     applied AS (SELECT inbox_events.* FROM inbox_fresh JOIN inbox_events USING (event_id)),
//	     effect_1 AS (STATEMENTS[0]), …
//	SELECT event_id FROM inbox_fresh
//
// Each statement reads the events it applies from applied (the new ones
// only: inbox_events is refused in a statement, as reading it would apply a
// redelivery again) and $1, now (epoch ms). Lock order: the receipts are
// inserted in event id order; a statement that updates shared rows must
// touch them in one order (billing: one upsert per org, in org id order), so
// that two concurrent groups never deadlock.
type PostgresEffect[V any] struct {
	// Columns are applied's columns beyond event_id, as "name type" with a
	// PostgreSQL type ("org_id uuid", "delta bigint").
	Columns []string
	// Args returns one array per column, in Columns' order, for the events
	// (in the order given).
	Args func(events []Event[V]) []any
	// Statements are the effect's data-modifying statements, each a CTE of
	// the one statement.
	Statements []string
}

// Failpoints are the crash points (infra/failpoint) a consumer's inbox
// passes; an empty name is no point.
type Failpoints struct {
	BeforeCommit    string // receipts and effect written, transaction not yet committed
	AfterCommit     string // HTTP: committed, before the 2xx is written
	NATSAfterCommit string // NATS: committed, before the ack
}

// Consumer is what a slice brings to its inbox: its name, its tables, its
// handlers and its effect.
type Consumer[V any] struct {
	// Name names the consumer in its metrics (NAME_events_total, …), its
	// spans ("NAME apply TYPE"), its messages and its HTTP realm.
	Name string
	// Receipts is the receipts table: (event_id uuid PRIMARY KEY, created_at
	// bigint NOT NULL), indexed on created_at (docs/adopting.md has the
	// migration to copy).
	Receipts string
	// NATSFailed is the table of the NATS messages terminated unapplied
	// (billing_nats_failed's columns); unused without NATS.
	NATSFailed string
	// Handlers are the event types the consumer applies, one each; any other
	// type is refused with fault.NotImplemented, writing nothing.
	Handlers []Handler[V]
	// Effect is what a new event does, per dialect.
	Effect Effect[V]
	// Failpoints are the crash points passed.
	Failpoints Failpoints
	// Committed, if set, is called after each commit with the events whose
	// receipt was new in it (never empty, in the order applied): what the
	// effect wrote is durable then, so it may wake whoever reads it (billing:
	// its outbox relay). It must not block, and it runs at most once per
	// commit: a transaction that failed or rolled back calls nothing, and a
	// crash between the commit and the call loses only the call.
	Committed func(applied []Event[V])
}

// identifier is what a table or consumer name may be: it is written into SQL
// and metric names.
var identifier = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// readsAll finds an effect statement that reads every delivered event,
// redeliveries included.
var readsAll = regexp.MustCompile(`(?i)\binbox_events\b`)

// check refuses a Consumer that cannot work (a wiring defect).
func (c *Consumer[V]) check() error {
	for _, n := range []struct{ field, v string }{{"Name", c.Name}, {"Receipts", c.Receipts}, {"NATSFailed", c.NATSFailed}} {
		if !identifier.MatchString(n.v) {
			return fmt.Errorf("inbox: Consumer.%s %q is not a lower-case SQL identifier", n.field, n.v)
		}
	}
	if len(c.Handlers) == 0 {
		return errors.New("inbox: a Consumer without handlers")
	}
	for _, h := range c.Handlers {
		if h.typ == "" || h.decode == nil {
			return errors.New("inbox: a handler without a type; build it with Handle")
		}
	}
	pg := c.Effect.Postgres
	if c.Effect.Func == nil && (c.Effect.SQLite == nil || !c.Effect.fastPath()) {
		return errors.New("inbox: a Consumer needs its effect on both dialects: Effect.Func, or Effect.Postgres and Effect.SQLite")
	}
	if c.Effect.fastPath() && pg.Args == nil {
		return errors.New("inbox: Effect.Postgres without its Args")
	}
	for _, s := range pg.Statements {
		if readsAll.MatchString(s) {
			return errors.New("inbox: an effect statement reads inbox_events: it must read applied, the new events only")
		}
	}
	return nil
}

// Option changes how an Inbox applies events.
type Option func(*options)

type options struct {
	groupMax int
	maxAge   time.Duration
}

// GroupMax bounds how many concurrent deliveries Apply puts in one
// transaction (group apply); 1 turns grouping off, so that every delivery runs
// its own transaction. A value below 1 keeps DefaultGroupMax.
func GroupMax(n int) Option {
	return func(o *options) {
		if n >= 1 {
			o.groupMax = n
		}
	}
}

// LateMargin is how much younger than the receipts' retention an event must
// be to be applied: a tenth of the retention. The retention deletes a receipt
// no sooner than its age after the consumer received its event, and the
// consumer received it no sooner than it occurred; so an event younger than
// the retention still has its receipt if it was ever applied. The margin
// covers what that argument leaves out: the two services' clocks may disagree
// (occurredAt is the producer's), and the apply commits some time after the
// check (a group waits, a transaction retries). A tenth is 72h at 720h: far
// beyond any skew or commit delay.
func LateMargin(retention time.Duration) time.Duration { return retention / 10 }

// RefuseOlderThan makes Decode refuse, with fault.Invalid and the reason
// "event_too_old", any event whose occurredAt is older than retention less
// LateMargin: it could be a duplicate whose receipt retention has deleted, so
// applying it could apply it twice. Zero or less keeps no bound.
func RefuseOlderThan(retention time.Duration) Option {
	return func(o *options) {
		if retention > 0 {
			o.maxAge = retention - LateMargin(retention)
		}
	}
}

// Inbox applies a Consumer's events exactly once in effect. It is safe for
// concurrent use.
type Inbox[V any] struct {
	c        Consumer[V]
	db       sqldb.DB
	d        dialect[V]
	logger   *slog.Logger
	m        *metrics
	handlers map[string]Handler[V]
	opts     options

	mu    sync.Mutex
	busy  bool           // a group transaction is in flight (its leader will hand off)
	queue []*applyReq[V] // deliveries waiting for the next group, in arrival order
}

// New returns the inbox of c over db (an opened database of either dialect:
// its statements are picked once, here). It panics on a Consumer that cannot
// work (a bad table name, two handlers of one type, an effect missing for a
// dialect): a wiring defect that must not pick a winner.
func New[V any](db sqldb.DB, logger *slog.Logger, c Consumer[V], opts ...Option) *Inbox[V] {
	if err := c.check(); err != nil {
		panic(err)
	}
	ib := &Inbox[V]{c: c, db: db, logger: logger, m: metricsOf(c.Name, c.NATSFailed),
		handlers: make(map[string]Handler[V], len(c.Handlers)), opts: options{groupMax: DefaultGroupMax}}
	for _, h := range c.Handlers {
		if _, dup := ib.handlers[h.typ]; dup {
			panic(fmt.Sprintf("%s: two handlers for event type %q", c.Name, h.typ))
		}
		ib.handlers[h.typ] = h
	}
	for _, o := range opts {
		o(&ib.opts)
	}
	ib.d = bind(db, &ib.c)
	return ib
}

// Name is the consumer's name.
func (ib *Inbox[V]) Name() string { return ib.c.Name }

// Decode turns a delivered event into the Event to apply, through its type's
// handler: a type without one is a fault.NotImplemented (nothing is applied,
// and the sender retries it until the consumer has one), a payload the handler
// refuses a fault.Invalid, an event older than the RefuseOlderThan bound a
// fault.Invalid with the reason "event_too_old" (never applied: its receipt
// may be gone). It writes nothing, so a delivery is answered before it joins
// a group.
func (ib *Inbox[V]) Decode(id uuid.UUID, typ string, occurredAt int64, payload json.RawMessage) (Event[V], error) {
	if ib.opts.maxAge > 0 {
		if age := time.Since(time.UnixMilli(occurredAt)); age > ib.opts.maxAge {
			return Event[V]{}, &fault.Error{Code: fault.Invalid, Reason: "event_too_old", Message: fmt.Sprintf(
				"event too old: occurredAt is %s ago, past RECEIPTS_RETENTION less its margin (%s): its receipt may be deleted, so it is never applied",
				age.Truncate(time.Second), ib.opts.maxAge)}
		}
	}
	h, ok := ib.handlers[typ]
	if !ok {
		return Event[V]{}, ib.notHandled(typ)
	}
	v, err := h.decode(payload)
	if err != nil {
		return Event[V]{}, err
	}
	return Event[V]{ID: id, Type: typ, OccurredAt: occurredAt, Value: v}, nil
}

// Handles reports whether the consumer has a handler for typ.
func (ib *Inbox[V]) Handles(typ string) bool {
	_, ok := ib.handlers[typ]
	return ok
}

// Types are the event types the consumer has a handler for, in the order of
// its handlers: what its durable of the stream takes (stream.ConsumerConfig's
// Types), so a type it has no handler for never reaches it over NATS.
func (ib *Inbox[V]) Types() []string {
	out := make([]string, 0, len(ib.c.Handlers))
	for _, h := range ib.c.Handlers {
		out = append(out, h.typ)
	}
	return out
}

func (ib *Inbox[V]) notHandled(typ string) error {
	return fault.Errorf(fault.NotImplemented, "event type %s is not handled by %s", quotedType(typ), ib.c.Name)
}

// quotedType is an untrusted type name as a message or a log line shows it:
// at most 64 characters, Go-quoted, so that no control, format or invalid
// byte of it reaches an answer or a log unescaped.
func quotedType(typ string) string { return strconv.Quote(wire.Clip(typ, 64)) }

// Apply applies e once, however often it is delivered. In ONE transaction it
// inserts e's receipt and, only if the receipt is new, runs the consumer's
// effect; it reports applied=false when the receipt already existed (a
// redelivery, which changes nothing and is a success). It returns only after
// the commit, so a caller that answers success after it never acknowledges an
// uncommitted change; a failure at any point before the commit leaves neither
// the receipt nor the effect. An event whose type has no handler is refused
// with fault.NotImplemented before anything is written. Other errors are
// *fault.Error: Unavailable when the database is down, contention outlasted
// the retries or ctx ended first, Internal otherwise.
//
// Concurrent calls are grouped (group.go): a call that finds no transaction in
// flight commits at once, alone; calls that arrive while one is in flight are
// applied together in the next one, each still with its own receipt and its
// own result. A group that fails for a reason other than an unavailable
// database is retried member by member, so one event that cannot be applied
// fails only its own call.
func (ib *Inbox[V]) Apply(ctx context.Context, e Event[V]) (applied bool, err error) {
	if !ib.Handles(e.Type) {
		return false, ib.notHandled(e.Type)
	}
	if telemetry.Enabled() {
		var span trace.Span
		attrs := []attribute.KeyValue{attribute.String("messaging.message.id", e.ID.String())}
		if a, ok := any(e.Value).(Attributer); ok {
			attrs = append(attrs, a.Attributes()...)
		}
		ctx, span = telemetry.Tracer(tracerName).Start(ctx, ib.c.Name+" apply "+e.Type, trace.WithAttributes(attrs...))
		defer func() {
			span.SetAttributes(attribute.Bool(ib.c.Name+".applied", applied))
			if err != nil {
				span.RecordError(err)
				span.SetStatus(codes.Error, "apply failed")
			}
			span.End()
		}()
	}
	if ib.opts.groupMax <= 1 {
		return ib.applyAlone(ctx, e)
	}
	return ib.applyGrouped(ctx, e)
}

// applyAlone applies e in a transaction of its own.
func (ib *Inbox[V]) applyAlone(ctx context.Context, e Event[V]) (bool, error) {
	ib.m.groupSizes.Observe(1)
	fresh, err := ib.commit(ctx, []Event[V]{e})
	if err != nil {
		return false, err
	}
	return fresh[e.ID], nil
}

// commit applies events (distinct ids) in one transaction, retrying it on
// contention, and returns the ids it applied. Errors are classified.
func (ib *Inbox[V]) commit(ctx context.Context, events []Event[V]) (map[uuid.UUID]bool, error) {
	for attempt := 1; ; attempt++ {
		fresh, err := ib.d.apply(ctx, events, time.Now().UnixMilli(), ib.beforeCommit())
		if err == nil {
			ib.committed(events, fresh)
			return fresh, nil
		}
		if !ib.db.Contention(err) {
			return nil, ib.classify(err)
		}
		if attempt == maxAttempts {
			return nil, fault.Wrap(fault.Unavailable, err, "database busy, retry later")
		}
		ib.m.contentionRetries.Inc()
		if err := pause(ctx, attempt); err != nil {
			return nil, ib.classify(err)
		}
	}
}

// committed calls Consumer.Committed with the events of a commit whose
// receipt was new, if any.
func (ib *Inbox[V]) committed(events []Event[V], fresh map[uuid.UUID]bool) {
	if ib.c.Committed == nil || len(fresh) == 0 {
		return
	}
	applied := make([]Event[V], 0, len(fresh))
	for _, e := range events {
		if fresh[e.ID] {
			applied = append(applied, e)
		}
	}
	if len(applied) > 0 {
		ib.c.Committed(applied)
	}
}

// beforeCommit is the point between the writes and the commit; nil when the
// build has no failpoints or FAILPOINTS does not arm it (then PostgreSQL's
// fast path runs the one statement on the pool, without BEGIN and COMMIT
// around it, in a failpoints build as in a normal one).
func (ib *Inbox[V]) beforeCommit() func() error {
	if !failpoint.Enabled || ib.c.Failpoints.BeforeCommit == "" || !failpoint.Armed(ib.c.Failpoints.BeforeCommit) {
		return nil
	}
	return func() error { return failpoint.Inject(ib.c.Failpoints.BeforeCommit) }
}

// inject passes the failpoint name, if any.
func inject(name string) error {
	if name == "" {
		return nil
	}
	return failpoint.Inject(name)
}

// Classify gives err the code the sender acts on: 503 (retry later) when the
// database could not be reached or the request ended first, 500 otherwise. A
// slice classifies its own reads with it.
func (ib *Inbox[V]) Classify(err error) error { return ib.classify(err) }

func (ib *Inbox[V]) classify(err error) error {
	switch {
	case ib.db.Unavailable(err):
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

// Retention is the retention of the consumer's receipts: those older than
// keep are deleted. keep must be longer than any window in which an event can
// still be redelivered (the producer's attempts × its capped delay, plus the
// time a dead-lettered row may wait for an operator's requeue), or a late
// redelivery would apply a second time; RefuseOlderThan(keep) refuses the
// events older than that.
func (ib *Inbox[V]) Retention(keep time.Duration) retention.Policy {
	return retention.Policy{Name: ib.c.Receipts, Keep: keep, Delete: ib.d.store.DeleteReceipts}
}

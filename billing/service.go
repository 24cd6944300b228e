package billing

import (
	"context"
	"log/slog"
	"time"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
)

// DefaultApplyGroupMax is the group size a Service uses when none is given
// (BILLING_APPLY_GROUP_MAX's default); MaxApplyGroupMax is the largest
// Config.Validate accepts.
const (
	DefaultApplyGroupMax = inbox.DefaultGroupMax
	MaxApplyGroupMax     = inbox.MaxGroupMax
)

// DefaultReceiptsRetention is how long a receipt is kept when not set
// otherwise (RECEIPTS_RETENTION's default).
const DefaultReceiptsRetention = inbox.DefaultReceiptsRetention

// Service is billing's inbox (infra/inbox: Apply, Decode, NATSHandler,
// ReplayNATSFailed, …, with billing's handlers and effect) and its quota read.
type Service struct {
	*inbox.Inbox[Effect]
	quota quotaReader
}

// Option changes how a Service applies events.
type Option func(*settings)

type settings struct {
	handlers []EventHandler
	inbox    []inbox.Option
	nudger   outbox.Nudger
	noRows   bool
	simple   bool
}

// SimplePath makes billing apply events on the simple path on PostgreSQL too:
// its effect as one Go function of the inbox's transaction (quotaEffect, a
// round trip per org and per QuotaChanged row), as on SQLite, instead of the
// inbox's one statement (the fast path, billing's default there). The result
// is the same, row for row; the drain differs (BENCHMARKS.md). For the
// benchmark of the two paths in one sitting, and for a team that compares
// them on its own load.
func SimplePath() Option {
	return func(s *settings) { s.simple = true }
}

// NudgeOnAppend makes the Service wake n (billing's outbox relay) after each
// commit that appended a QuotaChanged row. Without it the rows wait for a
// relay's next poll (or for none, when billing runs no relay).
func NudgeOnAppend(n outbox.Nudger) Option {
	return func(s *settings) { s.nudger = n }
}

// ApplyGroupMax bounds how many concurrent deliveries Apply puts in one
// transaction (inbox.GroupMax); 1 turns grouping off.
func ApplyGroupMax(n int) Option {
	return func(s *settings) { s.inbox = append(s.inbox, inbox.GroupMax(n)) }
}

// RefuseOlderThan makes Decode refuse any event older than retention less
// inbox.LateMargin (inbox.RefuseOlderThan): its receipt may be deleted.
func RefuseOlderThan(retention time.Duration) Option {
	return func(s *settings) { s.inbox = append(s.inbox, inbox.RefuseOlderThan(retention)) }
}

// Handling makes the Service apply exactly the event types of handlers, in
// place of Events: how a test adds a type of its own as docs/events.md adds
// one, without a second registry in the code.
func Handling(handlers ...EventHandler) Option {
	return func(s *settings) { s.handlers = handlers }
}

// NewService returns the billing use cases over db (its statements picked
// once for db's dialect), applying the events of Events, with group apply at
// DefaultApplyGroupMax unless opts say otherwise. It panics when two handlers
// share a type or one has no type: a defect that must not pick a winner.
func NewService(db sqldb.DB, logger *slog.Logger, opts ...Option) *Service {
	var s settings
	for _, o := range opts {
		o(&s)
	}
	if s.handlers == nil {
		s.handlers = Events()
	}
	return &Service{
		Inbox: inbox.New(db, logger, consumer(s.handlers, s.nudger, !s.noRows, s.simple), s.inbox...),
		quota: readQuota(database.Pick(db, quotaReaders)),
	}
}

// Quota returns org's quota; an org no event has touched has 0 active rules.
func (s *Service) Quota(ctx context.Context, org uuid.UUID) (Quota, error) {
	n, err := s.quota(ctx, org)
	if err != nil {
		return Quota{}, s.Classify(err)
	}
	return Quota{OrgID: org, ActiveRules: n}, nil
}

package billing

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/telemetry"
)

// tracerName is the instrumentation scope of billing's spans.
const tracerName = "github.com/acme/outboxpair/billing"

// Contention retries: a serialization failure or a deadlock is the database asking
// for the whole transaction again, which is safe because the receipt and the change
// commit together or not at all. Anything else goes back to the sender, whose
// durable retry is the one that survives a crash.
const (
	maxAttempts  = 5
	retryPause   = 5 * time.Millisecond // first pause; it doubles, with jitter
	sqlSerialize = "40001"
	sqlDeadlock  = "40P01"
)

// Service applies delivered events and answers quota reads.
type Service struct {
	pool   *pgxpool.Pool
	store  Store
	logger *slog.Logger
}

// NewService returns the billing use cases over pool.
func NewService(pool *pgxpool.Pool, logger *slog.Logger) *Service {
	return &Service{pool: pool, logger: logger}
}

// Apply applies e once, however often it is delivered. In ONE transaction it
// inserts e's receipt and, only if the receipt is new, adds e's delta to the org's
// active rules; it reports applied=false when the receipt already existed (a
// redelivery, which changes nothing and is a success). It returns only after the
// commit, so a caller that answers success after it never acknowledges an
// uncommitted change; a failure at any point before the commit leaves neither the
// receipt nor the change. Errors are *fault.Error: Unavailable when the database is
// down or contention outlasted the retries, Internal otherwise.
func (s *Service) Apply(ctx context.Context, e Event) (applied bool, err error) {
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
	for attempt := 1; ; attempt++ {
		applied, err = s.applyOnce(ctx, e)
		if err == nil {
			return applied, nil
		}
		if !contention(err) {
			return false, classify(err)
		}
		if attempt == maxAttempts {
			return false, fault.Wrap(fault.Unavailable, err, "database busy, retry later")
		}
		contentionRetries.Inc()
		if err := pause(ctx, attempt); err != nil {
			return false, classify(err)
		}
	}
}

func (s *Service) applyOnce(ctx context.Context, e Event) (applied bool, err error) {
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		now := time.Now().UnixMilli()
		fresh, err := s.store.InsertReceipt(ctx, tx, e.ID, now)
		if err != nil || !fresh {
			return err
		}
		if err := s.store.AddActiveRules(ctx, tx, e.OrgID, e.Delta(), now); err != nil {
			return err
		}
		if err := failpoint.Inject(failpoint.BillingEventsBeforeCommit); err != nil {
			return err
		}
		applied = true
		return nil
	})
	if err != nil {
		return false, err
	}
	return applied, nil
}

// Quota returns org's quota; an org no event has touched has 0 active rules.
func (s *Service) Quota(ctx context.Context, org uuid.UUID) (Quota, error) {
	var n int64
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		n, err = s.store.ActiveRules(ctx, tx, org)
		return err
	})
	if err != nil {
		return Quota{}, classify(err)
	}
	return Quota{OrgID: org, ActiveRules: n}, nil
}

func contention(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == sqlSerialize || pgErr.Code == sqlDeadlock)
}

// classify gives err the code the sender acts on: 503 (retry later) when the
// database could not be reached or the request ended first, 500 otherwise. The
// cause is logged by the HTTP layer, never shown.
func classify(err error) error {
	switch {
	case postgres.Unavailable(err):
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

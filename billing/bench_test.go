package billing_test

import (
	"context"
	"testing"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/sqldb"
)

// BenchmarkApply measures sequential event applications, one transaction each,
// against the test PostgreSQL server.
func BenchmarkApply(b *testing.B) {
	ctx := context.Background()

	b.Run("new events", func(b *testing.B) {
		bb := setup(b, freshDB(b, sqldb.Postgres))
		org := uuid.New()
		for b.Loop() {
			ev := billing.Event{ID: uuid.Must(uuid.NewV7()), Type: billing.RuleActivated, OccurredAt: 1, Value: billing.Effect{OrgID: org, Delta: 1}}
			if _, err := bb.svc.Apply(ctx, ev); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})

	b.Run("redeliveries", func(b *testing.B) {
		bb := setup(b, freshDB(b, sqldb.Postgres))
		ev := billing.Event{ID: uuid.Must(uuid.NewV7()), Type: billing.RuleActivated, OccurredAt: 1, Value: billing.Effect{OrgID: uuid.New(), Delta: 1}}
		if _, err := bb.svc.Apply(ctx, ev); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if applied, err := bb.svc.Apply(ctx, ev); err != nil || applied {
				b.Fatal(applied, err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
	})
}

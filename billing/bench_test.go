package billing_test

import (
	"context"
	"sync/atomic"
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

// BenchmarkDrain measures billing draining a backlog as its intake does:
// concurrent applies (8 per core, the deliveries a relay keeps in flight and
// more), grouped by the inbox, over 100 orgs, each change appending its
// QuotaChanged row, on the fast path (billing's default on PostgreSQL: the
// inbox's one statement) and on the simple path (SimplePath: the Go
// function, a round trip per org and per row). With -count N the two run
// alternately, N times each, in one sitting:
//
//	go test -run '^$' -bench BenchmarkDrain -benchtime 4s -count 5 ./billing/
func BenchmarkDrain(b *testing.B) {
	ctx := context.Background()
	for _, path := range []struct {
		name string
		opts []billing.Option
	}{{"fast path", nil}, {"simple path", []billing.Option{billing.SimplePath()}}} {
		b.Run(path.name, func(b *testing.B) {
			bb := setup(b, freshDB(b, sqldb.Postgres), path.opts...)
			orgs := make([]uuid.UUID, 100)
			for i := range orgs {
				orgs[i] = uuid.New()
			}
			var next atomic.Int64
			b.SetParallelism(8)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					org := orgs[next.Add(1)%int64(len(orgs))]
					ev := billing.Event{ID: uuid.Must(uuid.NewV7()), Type: billing.RuleActivated, OccurredAt: 1,
						Value: billing.Effect{OrgID: org, Delta: 1}}
					if _, err := bb.svc.Apply(ctx, ev); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

package outbox

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

// BenchmarkClaimOverDeadEntries measures the claim with many settled rows that
// autovacuum has not removed yet (it is turned off for the table): their
// entries stay in the pending index until a vacuum. Each round claims 10 rows
// and marks them processed, as the relay does. "floor 0" is the claim of
// RunOnce and of the periodic sweep (and of every claim before the scan floor);
// "floor" is the background loop's claim. Figures: p50 and p99 in ms.
func BenchmarkClaimOverDeadEntries(b *testing.B) {
	const settled, rounds = 1_000_000, 300
	db := pgtest.New(b, migrations.Labeling)
	ctx := context.Background()
	exec := func(sql string, args ...any) {
		_, err := db.Pool.Exec(ctx, sql, args...)
		require.NoError(b, err)
	}
	exec(`ALTER TABLE outbox_events SET (autovacuum_enabled = false)`)
	base := time.Now().Add(-time.Hour).UnixMilli()
	// Inserted pending, then settled: the pending index keeps an entry for each.
	exec(`INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
		SELECT gen_random_uuid(), 'Thing', '{}', $1::bigint + g, $1::bigint + g, 0
		FROM generate_series(1, $2::int) g`, base, settled)
	exec(`UPDATE outbox_events SET processed_at = $1`, base)
	r, err := NewRelay(NewPostgresStore(db.Pool), Config{
		PollInterval: time.Second, ClaimSize: 10, HandlerTimeout: time.Second, Lease: time.Minute,
		MaxAttempts: 3, RetryBase: time.Second, RetryMax: time.Minute, ProcessedRetention: time.Hour,
	}, nil, nil)
	require.NoError(b, err)

	for _, bc := range []struct {
		name  string
		floor func(now int64) int64
	}{
		{"floor 0", func(int64) int64 { return 0 }},
		{"floor", func(now int64) int64 { return now - floorSlack.Milliseconds() }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var took []time.Duration
			for b.Loop() {
				took = took[:0]
				now := time.Now().UnixMilli()
				exec(`INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
					SELECT gen_random_uuid(), 'Thing', '{}', $1::bigint, $1::bigint, 0
					FROM generate_series(1, $2::int) g`, now, rounds*10)
				for range rounds {
					start := time.Now()
					got, err := r.claim(ctx, 10, bc.floor(now))
					took = append(took, time.Since(start))
					require.NoError(b, err)
					require.Len(b, got.jobs, 10)
					outcomes := make([]outcome, len(got.jobs))
					for i, j := range got.jobs {
						outcomes[i] = outcome{job: j, kind: kindProcessed, at: now}
					}
					_, err = r.settler.exec(ctx, outcomes)
					require.NoError(b, err)
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(took[len(took)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(0, "ns/op")
		})
	}
}

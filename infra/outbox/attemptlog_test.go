package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// records is a slog.Handler that keeps every record, for tests of what is
// logged.
type records struct {
	mu  *sync.Mutex
	all *[]slog.Record
}

func newRecords() records { return records{mu: &sync.Mutex{}, all: new([]slog.Record)} }

func (records) Enabled(context.Context, slog.Level) bool { return true }
func (h records) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.all = append(*h.all, r.Clone())
	return nil
}
func (h records) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h records) WithGroup(string) slog.Handler      { return h }

// matching is the records whose message is msg.
func (h records) matching(msg string) []slog.Record {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []slog.Record
	for _, r := range *h.all {
		if r.Message == msg {
			out = append(out, r)
		}
	}
	return out
}

func attrs(r slog.Record) map[string]slog.Value {
	m := make(map[string]slog.Value)
	r.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value; return true })
	return m
}

func TestRelayLogsFailedAttempts(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		const (
			one     = "outbox delivery attempt failed; the row is retried later"
			summary = "outbox delivery attempts failed; not logged one by one"
			rows    = 60
		)
		db := newDBOn(t, d)
		cfg := testConfig()
		cfg.RetryBase, cfg.RetryMax = time.Hour, time.Hour // one failed attempt a row
		log := newRecords()
		r, err := outbox.NewRelay(storeOf(t, db), cfg, []outbox.Subscriber{handle(func(context.Context, outbox.Message) error {
			return errors.New("billing is down")
		})}, slog.New(log))
		require.NoError(t, err)
		appendEvents(t, db, things(rows)...)
		start := time.Now()
		require.NoError(t, r.Start(ctxT(t)))
		require.Eventually(t, func() bool { return count(t, db, "attempts = 1 AND last_error IS NOT NULL") == rows },
			20*time.Second, 10*time.Millisecond)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx)) // writes the count of the last window
		took := time.Since(start)

		logged := log.matching(one)
		require.NotEmpty(t, logged, "a failed attempt is logged")
		for _, rec := range logged {
			require.Equal(t, slog.LevelWarn, rec.Level)
			a := attrs(rec)
			for _, key := range []string{"id", "tag", "attempt", "err", "next_try"} {
				require.Contains(t, a, key)
			}
			require.Equal(t, "Thing", a["tag"].String())
			require.EqualValues(t, 1, a["attempt"].Int64())
			require.Contains(t, a["err"].String(), "billing is down")
			require.WithinDuration(t, time.Now().Add(time.Hour), a["next_try"].Time(), 31*time.Minute)
		}
		windows := int(took/time.Second) + 2
		require.LessOrEqual(t, len(logged), 5*windows, "at most a few lines a second, not one a row")
		suppressed := int64(0)
		for _, rec := range log.matching(summary) {
			require.Equal(t, slog.LevelWarn, rec.Level)
			suppressed += attrs(rec)["suppressed"].Int64()
		}
		require.EqualValues(t, rows, int64(len(logged))+suppressed, "every failed attempt is logged or counted")
	})
}

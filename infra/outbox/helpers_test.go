package outbox_test

import (
	"context"
	"log/slog"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

// thing is the test event; its payload must decode into it.
type thing struct {
	N int `json:"n"`
}

func (thing) EventTag() string { return "Thing" }

// row is an outbox_events row as the tests inspect it.
type row struct {
	ID           uuid.UUID
	Tag          string
	Payload      string
	CreatedAt    int64
	AvailableAt  int64
	ClaimedUntil *int64
	Attempts     int
	ProcessedAt  *int64
	FailedAt     *int64
	LastError    *string
}

const rowColumns = `id, event_tag, payload::text, created_at, available_at, claimed_until, attempts, processed_at, failed_at, last_error`

func scanRow(r pgx.Row) (row, error) {
	var x row
	err := r.Scan(&x.ID, &x.Tag, &x.Payload, &x.CreatedAt, &x.AvailableAt, &x.ClaimedUntil,
		&x.Attempts, &x.ProcessedAt, &x.FailedAt, &x.LastError)
	return x, err
}

func getRow(t testing.TB, pool *pgxpool.Pool, id uuid.UUID) row {
	t.Helper()
	x, err := scanRow(pool.QueryRow(context.Background(), `SELECT `+rowColumns+` FROM outbox_events WHERE id = $1`, id))
	require.NoError(t, err)
	return x
}

func allRows(t testing.TB, pool *pgxpool.Pool) []row {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT `+rowColumns+` FROM outbox_events ORDER BY created_at, id`)
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) { return scanRow(r) })
	require.NoError(t, err)
	return out
}

func count(t testing.TB, pool *pgxpool.Pool, where string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events WHERE `+where, args...).Scan(&n))
	return n
}

func exec(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	_, err := pool.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

// appendEvents appends events in one committed transaction, as a use case would.
func appendEvents(t testing.TB, pool *pgxpool.Pool, events ...outbox.Event) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, 0, len(events))
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		for _, e := range events {
			id, err := outbox.Append(context.Background(), outbox.NewPostgresStore(nil), postgres.Tx{Tx: tx}, e)
			if err != nil {
				return err
			}
			ids = append(ids, id)
		}
		return nil
	})
	require.NoError(t, err)
	return ids
}

func things(n int) []outbox.Event {
	events := make([]outbox.Event, n)
	for i := range events {
		events[i] = thing{N: i}
	}
	return events
}

// insertRow writes a pending row with any tag and raw payload, created now.
func insertRow(t testing.TB, pool *pgxpool.Pool, tag, payload string) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	now := time.Now().UnixMilli()
	exec(t, pool, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
		VALUES ($1, $2, $3, $4, $4, 0)`, id, tag, payload, now)
	return id
}

// testConfig is a valid config with short intervals.
func testConfig() outbox.Config {
	return outbox.Config{
		PollInterval:       20 * time.Millisecond,
		ClaimSize:          10,
		HandlerTimeout:     2 * time.Second,
		Lease:              time.Minute,
		MaxAttempts:        5,
		RetryBase:          time.Second,
		RetryMax:           time.Hour,
		ProcessedRetention: 7 * 24 * time.Hour,
	}
}

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// newRelay builds a relay that is stopped when the test ends.
func newRelay(t testing.TB, pool *pgxpool.Pool, cfg outbox.Config, subs ...outbox.Subscriber) *outbox.Relay {
	t.Helper()
	r, err := outbox.NewRelay(outbox.NewPostgresStore(pool), cfg, subs, testLogger(t))
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(t, r.Stop(ctx))
	})
	return r
}

// handle subscribes fn to the tag "Thing" without decoding.
func handle(fn outbox.Handler) outbox.Subscriber {
	return outbox.Subscriber{Tag: thing{}.EventTag(), Handle: fn}
}

func ok(context.Context, outbox.Message) error { return nil }

// clock is a settable relay clock, safe for concurrent use.
type clock struct{ ms atomic.Int64 }

func newClock() *clock {
	c := &clock{}
	c.ms.Store(time.Now().UnixMilli())
	return c
}

func (c *clock) Now() time.Time      { return time.UnixMilli(c.ms.Load()) }
func (c *clock) Set(ms int64)        { c.ms.Store(ms) }
func (c *clock) Add(d time.Duration) { c.ms.Add(d.Milliseconds()) }
func (c *clock) Ms() int64           { return c.ms.Load() }

// newDB is a fresh labeling database.
func newDB(t testing.TB) *pgtest.DB {
	t.Helper()
	return pgtest.New(t, migrations.Labeling)
}

// withAppName returns dbURL with application_name set, so that a test can find
// (and terminate) exactly the backends of one pool.
func withAppName(t testing.TB, dbURL, name string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", name)
	u.RawQuery = q.Encode()
	return u.String()
}

func ctxT(t testing.TB) context.Context { return t.Context() }

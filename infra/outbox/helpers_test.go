package outbox_test

import (
	"context"
	"log/slog"
	"net/url"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
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

// rowColumns are the columns of row; payload as text on both dialects.
func rowColumns(db *dbtest.DB) string {
	payload := "payload::text"
	if db.Dialect() == sqldb.SQLite {
		payload = "payload"
	}
	return `id, event_tag, ` + payload + `, created_at, available_at, claimed_until, attempts, processed_at, failed_at, last_error`
}

// pg is a PostgreSQL pool of the tests that only PostgreSQL runs, as the
// helpers take a test's database: typed, so a helper cannot be handed
// anything else.
func pg(p *pgxpool.Pool) *dbtest.DB { return &dbtest.DB{DB: postgres.NewDB(p), Pool: p} }

// storeOf is the outbox store of a test's database.
func storeOf(t testing.TB, db *dbtest.DB) outbox.Store { return storeOn(t, db, outbox.DefaultTable) }

// The helpers below run on labeling's outbox_events; each has a twin that
// takes the outbox table (...In, storeOn), for the tests of a store built
// WithTable: their SQL, written for outbox_events, runs on that table.

// billingOutbox is the second table the conformance table runs on: billing's,
// as its migration creates it.
const billingOutbox = "billing_outbox_events"

// newBillingDBOn is a fresh billing database of dialect d, which holds
// billing_outbox_events and no outbox_events.
func newBillingDBOn(t testing.TB, d sqldb.Dialect) *dbtest.DB {
	t.Helper()
	return dbtest.New(t, d, migrations.Billing)
}

var outboxWord = regexp.MustCompile(`\boutbox_events\b`)

// onTable is sql, written for outbox_events, on table.
func onTable(table, sql string) string { return outboxWord.ReplaceAllLiteralString(sql, table) }

// storeOn is the outbox store of db on table.
func storeOn(t testing.TB, db *dbtest.DB, table string) outbox.Store {
	t.Helper()
	return outbox.NewStore(db.DB, outbox.WithTable(table))
}

func scanRow(r dbtest.Row) (row, error) {
	var x row
	err := r.Scan(&x.ID, &x.Tag, &x.Payload, &x.CreatedAt, &x.AvailableAt, &x.ClaimedUntil,
		&x.Attempts, &x.ProcessedAt, &x.FailedAt, &x.LastError)
	return x, err
}

func getRow(t testing.TB, db *dbtest.DB, id uuid.UUID) row {
	t.Helper()
	return getRowIn(t, db, outbox.DefaultTable, id)
}

func getRowIn(t testing.TB, db *dbtest.DB, table string, id uuid.UUID) row {
	t.Helper()
	d := db
	x, err := scanRow(d.QueryRow(onTable(table, `SELECT `+rowColumns(d)+` FROM outbox_events WHERE id = $1`), id))
	require.NoError(t, err)
	return x
}

func allRows(t testing.TB, db *dbtest.DB) []row {
	t.Helper()
	return allRowsIn(t, db, outbox.DefaultTable)
}

func allRowsIn(t testing.TB, db *dbtest.DB, table string) []row {
	t.Helper()
	d := db
	rows := d.Query(t, onTable(table, `SELECT `+rowColumns(d)+` FROM outbox_events ORDER BY created_at, id`))
	var out []row
	for rows.Next() {
		x, err := scanRow(rows)
		require.NoError(t, err)
		out = append(out, x)
	}
	require.NoError(t, rows.Err())
	return out
}

func count(t testing.TB, db *dbtest.DB, where string, args ...any) int {
	t.Helper()
	return countIn(t, db, outbox.DefaultTable, where, args...)
}

func countIn(t testing.TB, db *dbtest.DB, table, where string, args ...any) int {
	t.Helper()
	return db.Count(t, onTable(table, `SELECT count(*) FROM outbox_events WHERE `+where), args...)
}

func exec(t testing.TB, db *dbtest.DB, sql string, args ...any) {
	t.Helper()
	db.Exec(t, sql, args...)
}

// execIn is exec of sql, written for outbox_events, on table.
func execIn(t testing.TB, db *dbtest.DB, table, sql string, args ...any) {
	t.Helper()
	db.Exec(t, onTable(table, sql), args...)
}

// appendFunc appends one event in the transaction it was handed to.
type appendFunc func(outbox.Event) (uuid.UUID, error)

// inAppendTxIn runs fn in a transaction of db's dialect (committed when fn
// returns nil), handing it the append of that dialect's store on table bound
// to the transaction, as a use case's transaction appends.
func inAppendTxIn(ctx context.Context, db *dbtest.DB, table string, fn func(appendFunc) error) error {
	on := outbox.WithTable(table)
	return database.Pick(db.DB, database.Dialects[error]{
		Postgres: func(db *postgres.DB) error { return appendIn(ctx, db, outbox.NewPostgresStore(db.Pool, on), fn) },
		SQLite:   func(db *sqlite.DB) error { return appendIn(ctx, db, outbox.NewSQLiteStore(db, on), fn) },
	})
}

func appendIn[TX any](ctx context.Context, db sqldb.Transactor[TX], a outbox.Appender[TX], fn func(appendFunc) error) error {
	return db.InTx(ctx, sqldb.TxOptions{}, func(tx TX) error {
		return fn(func(e outbox.Event) (uuid.UUID, error) { return outbox.Append(ctx, a, tx, e) })
	})
}

// appendEvents appends events in one committed transaction, as a use case would.
func appendEvents(t testing.TB, db *dbtest.DB, events ...outbox.Event) []uuid.UUID {
	t.Helper()
	return appendEventsIn(t, db, outbox.DefaultTable, events...)
}

// appendEventsIn is appendEvents into table.
func appendEventsIn(t testing.TB, db *dbtest.DB, table string, events ...outbox.Event) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, 0, len(events))
	err := inAppendTxIn(context.Background(), db, table, func(app appendFunc) error {
		for _, e := range events {
			id, err := app(e)
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
func insertRow(t testing.TB, db *dbtest.DB, tag, payload string) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	now := time.Now().UnixMilli()
	exec(t, db, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
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
func newRelay(t testing.TB, db *dbtest.DB, cfg outbox.Config, subs ...outbox.Subscriber) *outbox.Relay {
	t.Helper()
	r, err := outbox.NewRelay(storeOf(t, db), cfg, subs, testLogger(t))
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

// newDB is a fresh labeling database on PostgreSQL, for the tests of what
// only PostgreSQL has (plans, sessions, LISTEN, backends to terminate).
func newDB(t testing.TB) *pgtest.DB {
	t.Helper()
	return pgtest.New(t, migrations.Labeling)
}

// newDBOn is a fresh labeling database of dialect d.
func newDBOn(t testing.TB, d sqldb.Dialect) *dbtest.DB {
	t.Helper()
	return dbtest.New(t, d, migrations.Labeling)
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

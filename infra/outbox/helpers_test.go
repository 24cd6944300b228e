package outbox_test

import (
	"context"
	"fmt"
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

// asDB is a test's database: a *dbtest.DB (either dialect), a PostgreSQL
// pool of the tests that only PostgreSQL runs, or a *tableDB.
func asDB(t testing.TB, db any) *dbtest.DB {
	t.Helper()
	d, ok := dbOf(db)
	if !ok {
		t.Fatalf("not a test database: %T", db)
	}
	return d
}

func dbOf(db any) (*dbtest.DB, bool) {
	switch d := db.(type) {
	case *dbtest.DB:
		return d, true
	case *pgxpool.Pool:
		return &dbtest.DB{DB: postgres.NewDB(d), Pool: d}, true
	case *tableDB:
		return d.DB, true
	default:
		return nil, false
	}
}

// tableDB is a test database whose outbox is another table than
// outbox_events: the helpers build their stores on it (outbox.WithTable) and
// run their SQL, written for outbox_events, on it.
type tableDB struct {
	*dbtest.DB
	table string
}

// billingOutbox is the second table the conformance table runs on: billing's,
// as its migration creates it.
const billingOutbox = "billing_outbox_events"

// newBillingOutboxDB is a fresh billing database of dialect d, whose outbox
// is billing_outbox_events.
func newBillingOutboxDB(t testing.TB, d sqldb.Dialect) *tableDB {
	t.Helper()
	return &tableDB{DB: dbtest.New(t, d, migrations.Billing), table: billingOutbox}
}

// tableIn is the outbox table of a test database.
func tableIn(db any) string {
	if d, ok := db.(*tableDB); ok {
		return d.table
	}
	return outbox.DefaultTable
}

var outboxWord = regexp.MustCompile(`\boutbox_events\b`)

// onTableOf is sql, written for outbox_events, on db's outbox table.
func onTableOf(db any, sql string) string {
	return outboxWord.ReplaceAllLiteralString(sql, tableIn(db))
}

// storeOf is the outbox store of a test's database.
func storeOf(t testing.TB, db any) outbox.Store {
	return outbox.NewStore(asDB(t, db).DB, outbox.WithTable(tableIn(db)))
}

func scanRow(r dbtest.Row) (row, error) {
	var x row
	err := r.Scan(&x.ID, &x.Tag, &x.Payload, &x.CreatedAt, &x.AvailableAt, &x.ClaimedUntil,
		&x.Attempts, &x.ProcessedAt, &x.FailedAt, &x.LastError)
	return x, err
}

func getRow(t testing.TB, db any, id uuid.UUID) row {
	t.Helper()
	d := asDB(t, db)
	x, err := scanRow(d.QueryRow(onTableOf(db, `SELECT `+rowColumns(d)+` FROM outbox_events WHERE id = $1`), id))
	require.NoError(t, err)
	return x
}

func allRows(t testing.TB, db any) []row {
	t.Helper()
	d := asDB(t, db)
	rows := d.Query(t, onTableOf(db, `SELECT `+rowColumns(d)+` FROM outbox_events ORDER BY created_at, id`))
	var out []row
	for rows.Next() {
		x, err := scanRow(rows)
		require.NoError(t, err)
		out = append(out, x)
	}
	require.NoError(t, rows.Err())
	return out
}

func count(t testing.TB, db any, where string, args ...any) int {
	t.Helper()
	return asDB(t, db).Count(t, onTableOf(db, `SELECT count(*) FROM outbox_events WHERE `+where), args...)
}

func exec(t testing.TB, db any, sql string, args ...any) {
	t.Helper()
	asDB(t, db).Exec(t, onTableOf(db, sql), args...)
}

// appendFunc appends one event in the transaction it was handed to.
type appendFunc func(outbox.Event) (uuid.UUID, error)

// inAppendTx runs fn in a transaction of db's dialect (committed when fn
// returns nil), handing it the append of that dialect's store (on db's outbox
// table) bound to the transaction, as a use case's transaction appends.
func inAppendTx(ctx context.Context, db any, fn func(appendFunc) error) error {
	d, ok := dbOf(db)
	if !ok {
		return fmt.Errorf("not a test database: %T", db)
	}
	table := outbox.WithTable(tableIn(db))
	return database.Pick(d.DB, database.Dialects[error]{
		Postgres: func(db *postgres.DB) error { return appendIn(ctx, db, outbox.NewPostgresStore(db.Pool, table), fn) },
		SQLite:   func(db *sqlite.DB) error { return appendIn(ctx, db, outbox.NewSQLiteStore(db, table), fn) },
	})
}

func appendIn[TX any](ctx context.Context, db sqldb.Transactor[TX], a outbox.Appender[TX], fn func(appendFunc) error) error {
	return db.InTx(ctx, sqldb.TxOptions{}, func(tx TX) error {
		return fn(func(e outbox.Event) (uuid.UUID, error) { return outbox.Append(ctx, a, tx, e) })
	})
}

// appendEvents appends events in one committed transaction, as a use case would.
func appendEvents(t testing.TB, db any, events ...outbox.Event) []uuid.UUID {
	t.Helper()
	ids := make([]uuid.UUID, 0, len(events))
	err := inAppendTx(context.Background(), db, func(app appendFunc) error {
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
func insertRow(t testing.TB, db any, tag, payload string) uuid.UUID {
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
func newRelay(t testing.TB, db any, cfg outbox.Config, subs ...outbox.Subscriber) *outbox.Relay {
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

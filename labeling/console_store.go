package labeling

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// The console's reads of outbox_events, bounded: every list is a page, every
// count stops at countCap (shown as "countCap+"), and each is served by one of
// the table's partial indexes (pending, processed, failed). The statements are
// written once with $n parameters; on SQLite $n becomes ?n (the same numbered
// parameter).

// countCap bounds every count the overview shows.
const countCap = 10000

var errNoRow = errors.New("no such row")

// consoleQueries are the console's reads on one dialect, picked once by
// newConsoleQueries.
type consoleQueries struct {
	db sqldb.DB
	// run runs stmt (in its PostgreSQL form) in a read-only transaction and
	// calls fn with its rows.
	run func(ctx context.Context, stmt string, args []any, fn func(scanner) error) error
	// inJSON is the dialect's "the ids of the JSON array $1" (a subquery).
	inJSON string
}

func newConsoleQueries(db sqldb.DB) consoleQueries {
	q := database.Pick(db, database.Dialects[consoleQueries]{
		Postgres: func(d *postgres.DB) consoleQueries {
			return consoleQueries{run: pgQuery(d), inJSON: `SELECT jsonb_array_elements_text($1::jsonb)::uuid`}
		},
		SQLite: func(d *sqlite.DB) consoleQueries {
			return consoleQueries{run: sqliteQuery(d), inJSON: `SELECT value FROM json_each($1)`}
		},
	})
	q.db = db
	return q
}

// Counts is the overview's figures, each at most countCap+1 (shown "10000+").
type Counts struct {
	Pending, InFlight, Retrying, Failed int64
	OldestPending                       *int64 // created_at of the oldest pending row
	Tags                                []TagCount
	Cap                                 int64
}

// TagCount is one event tag's pending and failed rows (each bounded like Counts).
type TagCount struct {
	Tag             string
	Pending, Failed int64
}

// ConsoleRow is one outbox row as the console shows it.
type ConsoleRow struct {
	ID                                  uuid.UUID
	Tag                                 string
	Payload                             string
	CreatedAt, AvailableAt              int64
	ClaimedUntil, ProcessedAt, FailedAt *int64
	Attempts                            int
	LastError                           string
	Trace                               string
	Claimed                             bool   // claimed_until is in the future: a relay holds it now
	Subscriber                          string // the row's subscriber column ('' billing's)
}

// SubscriberName is who the row delivers to: billing for the default
// subscriber (BILLING_URL), a name of SUBSCRIBERS otherwise.
func (x ConsoleRow) SubscriberName() string {
	if x.Subscriber == outbox.DefaultSubscriber {
		return "billing"
	}
	return x.Subscriber
}

type scanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

var numbered = regexp.MustCompile(`\$(\d+)`)

// sqliteForm turns the statements' PostgreSQL casts and functions into SQLite's
// (uuids are text there already).
var sqliteForm = strings.NewReplacer("::text", "", "::uuid", "", "strpos(", "instr(")

// query runs stmt in a read-only transaction of db's dialect and calls fn with its rows.
func (q consoleQueries) query(ctx context.Context, stmt string, args []any, fn func(scanner) error) error {
	return q.run(ctx, stmt, args, fn)
}

func pgQuery(db *postgres.DB) func(context.Context, string, []any, func(scanner) error) error {
	return func(ctx context.Context, stmt string, args []any, fn func(scanner) error) error {
		return db.InTx(ctx, sqldb.TxOptions{ReadOnly: true}, func(tx postgres.Tx) error {
			rows, err := tx.Query(ctx, stmt, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			return fn(pgRows{rows})
		})
	}
}

func sqliteQuery(db *sqlite.DB) func(context.Context, string, []any, func(scanner) error) error {
	return func(ctx context.Context, stmt string, args []any, fn func(scanner) error) error {
		stmt = sqliteForm.Replace(numbered.ReplaceAllString(stmt, "?$1"))
		return db.InTx(ctx, sqldb.TxOptions{ReadOnly: true}, func(tx sqlite.Tx) error {
			rows, err := tx.Query(ctx, stmt, args...)
			if err != nil {
				return err
			}
			defer func() { _ = rows.Close() }()
			return fn(rows)
		})
	}
}

type pgRows struct{ pgx.Rows }

func (r pgRows) Err() error { return r.Rows.Err() }

var _ scanner = (*sql.Rows)(nil)

// counts reads the overview's figures at now (epoch ms). Each subquery walks
// one partial index and stops after countCap+1 rows.
func (q consoleQueries) counts(ctx context.Context, now int64) (Counts, error) {
	c := Counts{Cap: countCap}
	err := q.query(ctx, `
		SELECT
		 (SELECT count(*) FROM (SELECT 1 FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL LIMIT $1) p),
		 (SELECT count(*) FROM (SELECT 1 FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL AND claimed_until > $2 LIMIT $1) p),
		 (SELECT count(*) FROM (SELECT 1 FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL AND attempts > 0 AND available_at > $2 AND (claimed_until IS NULL OR claimed_until <= $2) LIMIT $1) p),
		 (SELECT count(*) FROM (SELECT 1 FROM outbox_events WHERE failed_at IS NOT NULL LIMIT $1) f),
		 (SELECT min(created_at) FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL)`,
		[]any{countCap + 1, now}, func(r scanner) error {
			if !r.Next() {
				return r.Err()
			}
			var oldest sql.NullInt64
			if err := r.Scan(&c.Pending, &c.InFlight, &c.Retrying, &c.Failed, &oldest); err != nil {
				return err
			}
			if oldest.Valid {
				c.OldestPending = &oldest.Int64
			}
			return nil
		})
	if err != nil {
		return c, err
	}
	err = q.query(ctx, `
		SELECT event_tag, sum(pending), sum(failed) FROM (
		  SELECT * FROM (SELECT event_tag, 1 AS pending, 0 AS failed FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL LIMIT $1) p
		  UNION ALL
		  SELECT * FROM (SELECT event_tag, 0, 1 FROM outbox_events WHERE failed_at IS NOT NULL LIMIT $1) f
		) t GROUP BY event_tag ORDER BY event_tag`,
		[]any{countCap + 1}, func(r scanner) error {
			for r.Next() {
				var t TagCount
				if err := r.Scan(&t.Tag, &t.Pending, &t.Failed); err != nil {
					return err
				}
				c.Tags = append(c.Tags, t)
			}
			return r.Err()
		})
	return c, err
}

// rateCap bounds the processed rows the chart reads (newest first): above
// about 27 rows/s the hour's older minutes are incomplete, and the chart says so.
const rateCap = 100000

// processedPerMinute is the processed rows of each of the 60 minutes before
// now, oldest first, read through the processed index.
func (q consoleQueries) processedPerMinute(ctx context.Context, now time.Time) ([]int64, error) {
	end := now.UnixMilli() / 60000
	start := end - 59
	out := make([]int64, 60)
	err := q.query(ctx, `
		SELECT m, count(*) FROM (
		  SELECT processed_at / 60000 AS m FROM outbox_events
		  WHERE processed_at >= $1 ORDER BY processed_at DESC LIMIT $2
		) t GROUP BY m`,
		[]any{start * 60000, rateCap}, func(r scanner) error {
			for r.Next() {
				var m, n int64
				if err := r.Scan(&m, &n); err != nil {
					return err
				}
				if i := m - start; i >= 0 && i < 60 {
					out[i] = n
				}
			}
			return r.Err()
		})
	return out, err
}

// failedFilter is the failed list's filter and keyset cursor.
type failedFilter struct {
	Tag, Error string
	AfterAt    int64
	AfterID    *uuid.UUID
}

const rowColumns = `id::text, event_tag, payload::text, created_at, available_at, claimed_until, processed_at, failed_at, attempts, coalesce(last_error, ''), coalesce(trace_context::text, ''), subscriber`

func scanRow(r scanner, now int64) (ConsoleRow, error) {
	var x ConsoleRow
	var claimed, processed, failed sql.NullInt64
	var id string
	if err := r.Scan(&id, &x.Tag, &x.Payload, &x.CreatedAt, &x.AvailableAt, &claimed, &processed, &failed, &x.Attempts, &x.LastError, &x.Trace, &x.Subscriber); err != nil {
		return x, err
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return x, err
	}
	x.ID = u
	x.ClaimedUntil, x.ProcessedAt, x.FailedAt = ptr(claimed), ptr(processed), ptr(failed)
	x.Claimed = x.ClaimedUntil != nil && *x.ClaimedUntil > now && x.ProcessedAt == nil && x.FailedAt == nil
	return x, nil
}

func ptr(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	return &n.Int64
}

// failed is one page of failed rows in (failed_at, id) order after the cursor,
// through the failed index.
func (q consoleQueries) failed(ctx context.Context, f failedFilter, limit int) ([]ConsoleRow, error) {
	var after any
	if f.AfterID != nil {
		after = f.AfterID.String()
	}
	var out []ConsoleRow
	now := time.Now().UnixMilli()
	err := q.query(ctx, `
		SELECT `+rowColumns+` FROM outbox_events
		WHERE failed_at IS NOT NULL
		  AND ($1::text = '' OR event_tag = $1)
		  AND ($2::text = '' OR strpos(coalesce(last_error, ''), $2) > 0)
		  AND ($3::uuid IS NULL OR failed_at > $4 OR (failed_at = $4 AND id > $3::uuid))
		ORDER BY failed_at, id LIMIT $5`,
		[]any{f.Tag, f.Error, after, f.AfterAt, limit}, func(r scanner) error {
			for r.Next() {
				x, err := scanRow(r, now)
				if err != nil {
					return err
				}
				out = append(out, x)
			}
			return r.Err()
		})
	return out, err
}

// row reads one row by id.
func (q consoleQueries) row(ctx context.Context, id uuid.UUID) (ConsoleRow, error) {
	var x ConsoleRow
	found := false
	err := q.query(ctx, `SELECT `+rowColumns+` FROM outbox_events WHERE id = $1::uuid`, []any{id.String()}, func(r scanner) error {
		if !r.Next() {
			return r.Err()
		}
		var err error
		x, err = scanRow(r, time.Now().UnixMilli())
		found = err == nil
		return err
	})
	if err == nil && !found {
		err = errNoRow
	}
	return x, err
}

// failedIDsOfTag is the ids of at most limit failed rows of tag, oldest failure first.
func (q consoleQueries) failedIDsOfTag(ctx context.Context, tag string, limit int) ([]uuid.UUID, error) {
	return q.ids(ctx, `SELECT id::text FROM outbox_events WHERE failed_at IS NOT NULL AND event_tag = $1 ORDER BY failed_at, id LIMIT $2`, tag, limit)
}

// failedAmong is the ids among ids that name failed rows.
func (q consoleQueries) failedAmong(ctx context.Context, ids []uuid.UUID) ([]uuid.UUID, error) {
	b, _ := json.Marshal(ids) // uuid.UUID marshals as its canonical text
	return q.ids(ctx, `SELECT id::text FROM outbox_events WHERE failed_at IS NOT NULL AND id IN (`+q.inJSON+`) ORDER BY failed_at, id`, string(b))
}

func (q consoleQueries) ids(ctx context.Context, stmt string, args ...any) ([]uuid.UUID, error) {
	var out []uuid.UUID
	err := q.query(ctx, stmt, args, func(r scanner) error {
		for r.Next() {
			var s string
			if err := r.Scan(&s); err != nil {
				return err
			}
			u, err := uuid.Parse(s)
			if err != nil {
				return err
			}
			out = append(out, u)
		}
		return r.Err()
	})
	return out, err
}

// traceID is the trace id of a stored W3C trace context ({"traceparent": "00-<trace>-<span>-<flags>"}).
func traceID(stored string) string {
	if stored == "" {
		return ""
	}
	var tc map[string]string
	if json.Unmarshal([]byte(stored), &tc) != nil {
		return ""
	}
	parts := strings.Split(tc["traceparent"], "-")
	if len(parts) != 4 || len(parts[1]) != 32 {
		return ""
	}
	return parts[1]
}

package console

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
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// The outbox pages' reads of an outbox table (labeling's outbox_events,
// billing's billing_outbox_events), bounded: every list is a page, every
// count stops at countCap (shown as "countCap+"), and each is served by one
// of the table's partial indexes (pending, processed, failed). The statements
// are written once on outbox_events with $n parameters; the table's name
// replaces outbox_events (a constant of the program, checked by the outbox
// store: outbox.WithTable), and on SQLite $n becomes ?n (the same numbered
// parameter).

// countCap bounds every count the overview shows.
const countCap = 10000

var errNoRow = errors.New("no such row")

// outboxQueries are the outbox pages' reads on one dialect and table, picked
// once by newOutboxQueries.
type outboxQueries struct {
	db    sqldb.DB
	table string
	// run runs stmt (in its PostgreSQL form, on outbox_events) in a read-only
	// transaction and calls fn with its rows.
	run func(ctx context.Context, stmt string, args []any, fn func(scanner) error) error
	// inJSON is the dialect's "the ids of the JSON array $1" (a subquery).
	inJSON string
}

func newOutboxQueries(db sqldb.DB, table string) outboxQueries {
	q := database.Pick(db, database.Dialects[outboxQueries]{
		Postgres: func(d *postgres.DB) outboxQueries {
			return outboxQueries{run: pgQuery(d), inJSON: `SELECT jsonb_array_elements_text($1::jsonb)::uuid`}
		},
		SQLite: func(d *sqlite.DB) outboxQueries {
			return outboxQueries{run: sqliteQuery(d), inJSON: `SELECT value FROM json_each($1)`}
		},
	})
	q.db, q.table = db, table
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

// OutboxRow is one outbox row as the console shows it. Its columns are read
// in one place (rowColumns, scanRow): a column added to the outbox table is
// added there, here and in the templates.
type OutboxRow struct {
	ID                                  uuid.UUID
	Tag                                 string
	Payload                             string
	CreatedAt, AvailableAt              int64
	ClaimedUntil, ProcessedAt, FailedAt *int64
	Attempts                            int
	LastError                           string
	Trace                               string
	Subscriber                          string // '' for the table's default subscriber (OutboxConfig.Subscriber)
	Claimed                             bool   // claimed_until is in the future: a relay holds it now
	// Retrying: pending, tried before, its next attempt still ahead and no
	// relay holding it.
	Retrying bool
}

// Pending reports whether the row is neither processed nor failed.
func (r OutboxRow) Pending() bool { return r.ProcessedAt == nil && r.FailedAt == nil }

// State names the row's state as the pages show it.
func (r OutboxRow) State() string {
	switch {
	case r.ProcessedAt != nil:
		return "processed"
	case r.FailedAt != nil:
		return "failed"
	case r.Claimed:
		return "in flight"
	case r.Retrying:
		return "waiting for a retry"
	default:
		return "pending"
	}
}

type scanner interface {
	Next() bool
	Scan(dest ...any) error
	Err() error
}

var (
	numbered     = regexp.MustCompile(`\$(\d+)`)
	outboxEvents = regexp.MustCompile(`\boutbox_events\b`)
)

// sqliteForm turns the statements' PostgreSQL casts and functions into SQLite's
// (uuids are text there already).
var sqliteForm = strings.NewReplacer("::text", "", "::uuid", "", "::bigint", "", "strpos(", "instr(")

// query runs stmt on the pages' table in a read-only transaction of db's
// dialect and calls fn with its rows.
func (q outboxQueries) query(ctx context.Context, stmt string, args []any, fn func(scanner) error) error {
	return q.run(ctx, outboxEvents.ReplaceAllLiteralString(stmt, q.table), args, fn)
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
func (q outboxQueries) counts(ctx context.Context, now int64) (Counts, error) {
	c := Counts{Cap: countCap}
	err := q.query(ctx, `
		SELECT
		 (SELECT count(*) FROM (SELECT 1 FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL LIMIT $1) p),
		 (SELECT count(*) FROM (SELECT 1 FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL AND claimed_until > $2 LIMIT $1) p),
		 (SELECT count(*) FROM (SELECT 1 FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL AND `+retryingSQL+` LIMIT $1) p),
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

// retryingSQL is "a pending row waiting for a retry at $2 (now)": tried
// before, its next attempt ahead, no relay holding it.
const retryingSQL = `attempts > 0 AND available_at > $2 AND (claimed_until IS NULL OR claimed_until <= $2)`

// rateCap bounds the processed rows the chart reads (newest first): above
// about 27 rows/s the hour's older minutes are incomplete, and the chart says so.
const rateCap = 100000

// processedPerMinute is the processed rows of each of the 60 minutes before
// now, oldest first, read through the processed index.
func (q outboxQueries) processedPerMinute(ctx context.Context, now time.Time) ([]int64, error) {
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

// lastProcessed is the newest processed_at (nil: none), through the processed index.
func (q outboxQueries) lastProcessed(ctx context.Context) (*int64, error) {
	var out *int64
	err := q.query(ctx, `SELECT max(processed_at) FROM outbox_events`, nil, func(r scanner) error {
		if !r.Next() {
			return r.Err()
		}
		var v sql.NullInt64
		if err := r.Scan(&v); err != nil {
			return err
		}
		out = ptr(v)
		return nil
	})
	return out, err
}

// lastAnswers is the limit rows with an error that are failed or still
// pending, newest first by their failure (failed_at) or next attempt
// (available_at): what the peer answered lately other than a success. It
// reads at most countCap+1 entries of each partial index.
func (q outboxQueries) lastAnswers(ctx context.Context, limit int) ([]OutboxRow, error) {
	return q.rows(ctx, `
		SELECT `+rowColumns+` FROM (
		  SELECT * FROM (SELECT * FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL LIMIT $1) p
		  UNION ALL
		  SELECT * FROM (SELECT * FROM outbox_events WHERE failed_at IS NOT NULL LIMIT $1) f
		) outbox_rows WHERE last_error IS NOT NULL
		ORDER BY coalesce(failed_at, available_at) DESC, id DESC LIMIT $2`,
		countCap+1, limit)
}

// listFilter is a list's filter and keyset cursor.
type listFilter struct {
	Failed     bool // the failed rows, else the pending ones
	Tag, Error string
	// State narrows the pending rows: "" all, "inflight", "retrying", "ready".
	State   string
	AfterAt int64
	AfterID *uuid.UUID
}

const rowColumns = `id::text, event_tag, payload::text, created_at, available_at, claimed_until, processed_at, failed_at, attempts, coalesce(last_error, ''), coalesce(trace_context::text, ''), subscriber`

func scanRow(r scanner, now int64) (OutboxRow, error) {
	var x OutboxRow
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
	x.Claimed = x.ClaimedUntil != nil && *x.ClaimedUntil > now && x.Pending()
	x.Retrying = x.Pending() && !x.Claimed && x.Attempts > 0 && x.AvailableAt > now
	return x, nil
}

func ptr(n sql.NullInt64) *int64 {
	if !n.Valid {
		return nil
	}
	return &n.Int64
}

// rows runs a statement that selects rowColumns and scans its rows.
func (q outboxQueries) rows(ctx context.Context, stmt string, args ...any) ([]OutboxRow, error) {
	var out []OutboxRow
	now := time.Now().UnixMilli()
	err := q.query(ctx, stmt, args, func(r scanner) error {
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

// list is one page of failed rows in (failed_at, id) order, through the
// failed index, or of pending rows in (created_at, id) order, through the
// pending index, after the cursor.
func (q outboxQueries) list(ctx context.Context, f listFilter, limit int) ([]OutboxRow, error) {
	var after any
	if f.AfterID != nil {
		after = f.AfterID.String()
	}
	now := time.Now().UnixMilli()
	if f.Failed {
		return q.rows(ctx, `
			SELECT `+rowColumns+` FROM outbox_events
			WHERE failed_at IS NOT NULL
			  AND ($1::text = '' OR event_tag = $1)
			  AND ($2::text = '' OR strpos(coalesce(last_error, ''), $2) > 0)
			  AND ($3::uuid IS NULL OR failed_at > $4 OR (failed_at = $4 AND id > $3::uuid))
			ORDER BY failed_at, id LIMIT $5`,
			f.Tag, f.Error, after, f.AfterAt, limit)
	}
	return q.rows(ctx, `
		SELECT `+rowColumns+` FROM outbox_events
		WHERE processed_at IS NULL AND failed_at IS NULL
		  AND ($1::text = '' OR event_tag = $1)
		  AND ($2::text = '' OR strpos(coalesce(last_error, ''), $2) > 0)
		  AND ($3::uuid IS NULL OR created_at > $4 OR (created_at = $4 AND id > $3::uuid))
		  AND ($7::text = ''
		    OR ($7::text = 'inflight' AND claimed_until > $6::bigint)
		    OR ($7::text = 'retrying' AND attempts > 0 AND available_at > $6::bigint AND (claimed_until IS NULL OR claimed_until <= $6::bigint))
		    OR ($7::text = 'ready' AND available_at <= $6::bigint AND (claimed_until IS NULL OR claimed_until <= $6::bigint)))
		ORDER BY created_at, id LIMIT $5`,
		f.Tag, f.Error, after, f.AfterAt, limit, now, f.State)
}

// row reads one row by id.
func (q outboxQueries) row(ctx context.Context, id uuid.UUID) (OutboxRow, error) {
	rows, err := q.rows(ctx, `SELECT `+rowColumns+` FROM outbox_events WHERE id = $1::uuid`, id.String())
	if err == nil && len(rows) == 0 {
		err = errNoRow
	}
	if err != nil {
		return OutboxRow{}, err
	}
	return rows[0], nil
}

// target is a row an action touches, with what its confirmation needs.
type target struct {
	ID        uuid.UUID
	LastError string
}

// stateWhere is the rows an action may touch: failed ones for requeue and
// delete, pending ones for fail.
func stateWhere(failed bool) string {
	if failed {
		return `failed_at IS NOT NULL`
	}
	return `processed_at IS NULL AND failed_at IS NULL`
}

// stateOrder is the order of those rows, along their partial index.
func stateOrder(failed bool) string {
	if failed {
		return `failed_at, id`
	}
	return `created_at, id`
}

// ofTag is at most limit rows of tag in the state the action needs, in their
// list's order.
func (q outboxQueries) ofTag(ctx context.Context, failed bool, tag string, limit int) ([]target, error) {
	return q.targets(ctx, `SELECT id::text, coalesce(last_error, '') FROM outbox_events WHERE `+stateWhere(failed)+` AND event_tag = $1 ORDER BY `+stateOrder(failed)+` LIMIT $2`, tag, limit)
}

// among is the rows among ids in the state the action needs.
func (q outboxQueries) among(ctx context.Context, failed bool, ids []uuid.UUID) ([]target, error) {
	b, _ := json.Marshal(ids) // uuid.UUID marshals as its canonical text
	return q.targets(ctx, `SELECT id::text, coalesce(last_error, '') FROM outbox_events WHERE `+stateWhere(failed)+` AND id IN (`+q.inJSON+`) ORDER BY `+stateOrder(failed), string(b))
}

func (q outboxQueries) targets(ctx context.Context, stmt string, args ...any) ([]target, error) {
	var out []target
	err := q.query(ctx, stmt, args, func(r scanner) error {
		for r.Next() {
			var s string
			var t target
			if err := r.Scan(&s, &t.LastError); err != nil {
				return err
			}
			u, err := uuid.Parse(s)
			if err != nil {
				return err
			}
			t.ID = u
			out = append(out, t)
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

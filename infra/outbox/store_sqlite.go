package outbox

// The outbox's SQLite dialect: the same statements as the PostgreSQL one
// (store_postgres.go), in SQLite's form. SQLite has one writer, so the claim
// needs no SKIP LOCKED: two relays (in one process or several on one file)
// claim one after another, each seeing the other's committed claim. Every
// write runs in a BEGIN IMMEDIATE transaction on the process's writer
// connection (infra/sqlite).

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// sqliteStore is Store on a SQLite database.
type sqliteStore struct {
	db     *sqlite.DB
	sql    *sqliteStatements
	fanout fanout // WithRoutes, nil without
}

// sqliteStatements are the store's statements on its table, each built once
// per table (sqliteStatementsFor) from the text written beside its method.
type sqliteStatements struct {
	table           string
	append          string
	appendDelivery  string
	claim           string
	settle          string
	backlog         string
	failed          string
	requeueAll      string
	requeueIDs      string
	deleteCheck     string
	delete          string
	deleteProcessed string
}

var sqliteStatementsByTable sync.Map // table → *sqliteStatements

func sqliteStatementsFor(table string) *sqliteStatements {
	if st, ok := sqliteStatementsByTable.Load(table); ok {
		return st.(*sqliteStatements)
	}
	st, _ := sqliteStatementsByTable.LoadOrStore(table, &sqliteStatements{
		table:           table,
		append:          onTable(sqliteAppendSQL, table),
		appendDelivery:  onTable(sqliteAppendDeliverySQL, table),
		claim:           onTable(sqliteClaimSQL, table),
		settle:          onTable(sqliteSettleSQL, table),
		backlog:         onTable(sqliteBacklogSQL, table),
		failed:          onTable(sqliteFailedSQL, table),
		requeueAll:      onTable(sqliteRequeueSQL(`failed_at IS NOT NULL`), table),
		requeueIDs:      onTable(sqliteRequeueSQL(`failed_at IS NOT NULL AND id IN (SELECT value FROM json_each(?2))`), table),
		deleteCheck:     onTable(sqliteDeleteCheckSQL, table),
		delete:          onTable(sqliteDeleteSQL, table),
		deleteProcessed: onTable(sqliteDeleteProcessedSQL, table),
	})
	return st.(*sqliteStatements)
}

var (
	_ DialectStore[sqlite.Tx] = (*sqliteStore)(nil)
	_ RelayStore              = (*sqliteStore)(nil)
)

// NewSQLiteStore returns the outbox store of a SQLite database, on
// DefaultTable or the table of WithTable.
func NewSQLiteStore(db *sqlite.DB, opts ...StoreOption) DialectStore[sqlite.Tx] {
	o := optionsOf(opts)
	metricsFor(o.table)
	return &sqliteStore{db: db, sql: sqliteStatementsFor(o.table), fanout: fanoutOf(o.routes)}
}

func (s *sqliteStore) subscribersOf(tag string) []string { return s.fanout[tag] }

// Table is the store's outbox table.
func (s *sqliteStore) Table() string { return s.sql.table }

// write runs fn in a write transaction (BEGIN IMMEDIATE on the writer).
func (s *sqliteStore) write(ctx context.Context, fn func(sqlite.Tx) error) error {
	return s.db.InTx(ctx, sqldb.TxOptions{}, fn)
}

// nullText binds b as TEXT (the JSON columns), NULL when nil: a []byte would
// be stored as a BLOB.
func nullText(b []byte) any {
	if b == nil {
		return nil
	}
	return string(b)
}

const sqliteAppendSQL = `
		INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, trace_context)
		VALUES (?1, ?2, ?3, ?4, ?4, 0, ?5)`

// sqliteAppendDeliverySQL inserts one further subscriber's row (?6 its name,
// ?7 the event's id): a statement per row costs no round trip on SQLite.
const sqliteAppendDeliverySQL = `
		INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, trace_context, subscriber, event_id)
		VALUES (?1, ?2, ?3, ?4, ?4, 0, ?5, ?6, ?7)`

// Append inserts row, and its further subscribers' rows, in tx.
func (s *sqliteStore) Append(ctx context.Context, tx sqlite.Tx, row NewRow) error {
	_, err := tx.Exec(ctx, s.sql.append,
		row.ID, row.Tag, string(row.Payload), row.CreatedAt, nullText(row.Trace))
	for _, d := range row.Deliveries {
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, s.sql.appendDelivery,
			d.ID, row.Tag, string(row.Payload), row.CreatedAt, nullText(row.Trace), d.Subscriber, row.ID)
	}
	return err
}

// sqliteClaimSQL is the claim: the PostgreSQL statement without SKIP LOCKED (one
// writer at a time; the next claim sees this one's commit). The inner select
// reads outbox_events_pending_idx from the floor ?5 up. A row whose attempts
// are used up (?6) is dead-lettered, keeping attempts == ?6; every other row
// gets the token ?7, one more attempt, the lease ?3 and the end of the lease ?2.
// In SET, every column names its value before the update, as in PostgreSQL.
const sqliteClaimSQL = `
UPDATE outbox_events SET
	attempts      = CASE WHEN attempts >= ?6 THEN attempts ELSE attempts + 1 END,
	claimed_until = CASE WHEN attempts >= ?6 THEN NULL ELSE ?2 END,
	claim_token   = CASE WHEN attempts >= ?6 THEN NULL ELSE ?7 END,
	claim_lease   = CASE WHEN attempts >= ?6 THEN NULL ELSE ?3 END,
	failed_at     = CASE WHEN attempts >= ?6 THEN ?1 END,
	last_error    = CASE WHEN attempts >= ?6
		THEN 'attempt ' || attempts || ' of ' || ?6 || ' was never settled (its relay died or lost the database while holding the claim); last error: ' || coalesce(last_error, 'none')
		ELSE last_error END
WHERE id IN (
	SELECT id FROM outbox_events
	WHERE processed_at IS NULL AND failed_at IS NULL AND subscriber = ?8
		AND created_at >= ?5 AND available_at <= ?1
		AND (claimed_until IS NULL OR claimed_until < ?1 OR claimed_until > ?1 + 2 * claim_lease)
	ORDER BY created_at
	LIMIT ?4)
RETURNING id, coalesce(event_id, id), event_tag, payload, created_at, attempts, failed_at IS NOT NULL, trace_context`

// Claim runs the claim in one write transaction.
func (s *sqliteStore) Claim(ctx context.Context, a ClaimArgs, fn func(ClaimedRow)) error {
	var got []ClaimedRow
	err := s.write(ctx, func(tx sqlite.Tx) error {
		got = got[:0]
		rows, err := tx.Query(ctx, s.sql.claim, a.Now, a.Until, a.Lease, a.Limit, a.Floor, a.MaxAttempts, a.Token, a.Subscriber)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				c       ClaimedRow
				payload string
				trace   sql.NullString
			)
			if err := rows.Scan(&c.ID, &c.EventID, &c.Tag, &payload, &c.CreatedAt, &c.Attempts, &c.Dead, &trace); err != nil {
				return err
			}
			c.Payload = []byte(payload)
			if trace.Valid {
				c.Trace = []byte(trace.String)
			}
			got = append(got, c)
		}
		return rows.Err()
	})
	if err != nil {
		return err
	}
	// Handed over only once committed: a claim that rolled back took nothing.
	for _, c := range got {
		fn(c)
	}
	return nil
}

// sqliteSettleSQL settles one outcome, matched by id and claim token only (see the
// PostgreSQL settle); the batch runs in one transaction.
const sqliteSettleSQL = `
UPDATE outbox_events SET
	processed_at  = CASE WHEN ?3 = 'processed' THEN ?4 ELSE processed_at END,
	failed_at     = CASE WHEN ?3 = 'failed' THEN ?4 ELSE failed_at END,
	available_at  = CASE WHEN ?3 IN ('retry', 'wait') THEN ?4 ELSE available_at END,
	attempts      = CASE WHEN ?3 = 'wait' THEN max(attempts - 1, 0) ELSE attempts END,
	last_error    = CASE WHEN ?3 IN ('retry', 'wait', 'failed') THEN ?5 ELSE last_error END,
	claimed_until = NULL,
	claim_token   = NULL
WHERE id = ?1 AND claim_token = ?2`

// Settle applies batch in one write transaction, one prepared statement.
func (s *sqliteStore) Settle(ctx context.Context, batch []Settlement) (map[uuid.UUID]struct{}, error) {
	settled := make(map[uuid.UUID]struct{}, len(batch))
	err := s.write(ctx, func(tx sqlite.Tx) error {
		clear(settled)
		stmt, err := tx.Prepare(ctx, s.sql.settle)
		if err != nil {
			return err
		}
		defer stmt.Close()
		for _, o := range batch {
			res, err := stmt.Exec(ctx, o.ID, o.Token, o.Kind, o.At, o.Err)
			if err != nil {
				return err
			}
			if n, err := res.RowsAffected(); err != nil {
				return err
			} else if n > 0 {
				settled[o.ID] = struct{}{}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return settled, nil
}

// OpenRelay returns s: SQLite has one writer per process, which the relay
// shares with the API (its transactions are short).
func (s *sqliteStore) OpenRelay(int) (RelayStore, error) { return s, nil }

// Close does nothing: the relay has no connections of its own.
func (s *sqliteStore) Close(context.Context) {}

// read runs fn in a read-only transaction (on a reader, beside the writer),
// whose executor bounds its statements as every transaction's does.
func (s *sqliteStore) read(ctx context.Context, fn func(sqlite.Tx) error) error {
	return s.db.InTx(ctx, sqldb.TxOptions{ReadOnly: true}, fn)
}

const sqliteBacklogSQL = `
			SELECT (SELECT min(created_at) FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL),
			       (SELECT count(*) FROM outbox_events WHERE failed_at IS NOT NULL),
			       (SELECT count(*) FROM (SELECT 1 FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL
			                              LIMIT ` + pendingRowsCapSQL + `))`

// Backlog reads the oldest pending row and the failed count on a reader.
func (s *sqliteStore) Backlog(ctx context.Context) (*int64, int64, error) {
	b, err := s.backlog(ctx)
	return b.oldest, b.failed, err
}

// backlog is Backlog with the pending rows counted too, at most
// PendingRowsCap of them.
func (s *sqliteStore) backlog(ctx context.Context) (backlog, error) {
	var oldest sql.NullInt64
	var b backlog
	err := s.read(ctx, func(tx sqlite.Tx) error {
		return tx.QueryRow(ctx, s.sql.backlog).Scan(&oldest, &b.failed, &b.pending)
	})
	if err != nil {
		return backlog{}, err
	}
	if oldest.Valid {
		b.oldest = &oldest.Int64
	}
	return b, nil
}

const sqliteFailedSQL = `
			SELECT id, event_tag, attempts, failed_at, coalesce(last_error, ''), subscriber
			FROM outbox_events WHERE failed_at IS NOT NULL
			ORDER BY failed_at, id`

// Failed lists the dead letter on a reader.
func (s *sqliteStore) Failed(ctx context.Context) ([]FailedRow, error) {
	var out []FailedRow
	err := s.read(ctx, func(tx sqlite.Tx) error {
		rows, err := tx.Query(ctx, s.sql.failed)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var f FailedRow
			if err := rows.Scan(&f.ID, &f.Tag, &f.Attempts, &f.FailedAt, &f.LastError, &f.Subscriber); err != nil {
				return err
			}
			out = append(out, f)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// idList is ids as a JSON array of lowercase UUID text, for json_each: one
// parameter however many ids.
func idList(ids []uuid.UUID) string {
	b, _ := json.Marshal(ids) // uuid.UUID marshals as its canonical text
	return string(b)
}

// sqliteRequeueSQL is the requeue of the failed rows that where selects.
func sqliteRequeueSQL(where string) string {
	return `
			UPDATE outbox_events
			SET failed_at = NULL, attempts = 0, available_at = ?1, claimed_until = NULL, claim_token = NULL
			WHERE ` + where
}

// Requeue requeues in one write transaction. Nobody is notified: a relay of
// another process finds the rows at its next sweep (a requeued row lies below
// its scan floor), as one with OUTBOX_NOTIFY=false does on PostgreSQL.
func (s *sqliteStore) Requeue(ctx context.Context, ids []uuid.UUID, all bool, now int64) (int64, error) {
	stmt, args := s.sql.requeueAll, []any{now}
	if !all {
		stmt = s.sql.requeueIDs
		args = append(args, idList(ids))
	}
	var n int64
	err := s.write(ctx, func(tx sqlite.Tx) error {
		res, err := tx.Exec(ctx, stmt, args...)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

const (
	sqliteDeleteCheckSQL = `
			SELECT id FROM outbox_events
			WHERE id IN (SELECT value FROM json_each(?1)) AND processed_at IS NULL AND failed_at IS NULL
			ORDER BY id`
	sqliteDeleteSQL = `
			DELETE FROM outbox_events
			WHERE id IN (SELECT value FROM json_each(?1)) AND (processed_at IS NOT NULL OR failed_at IS NOT NULL)`
)

// Delete checks and deletes in one write transaction: the write lock is held
// from its start, so no row changes state between the two.
func (s *sqliteStore) Delete(ctx context.Context, ids []uuid.UUID) (int64, error) {
	list := idList(ids)
	var deleted int64
	err := s.write(ctx, func(tx sqlite.Tx) error {
		rows, err := tx.Query(ctx, s.sql.deleteCheck, list)
		if err != nil {
			return err
		}
		var pending []string
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			pending = append(pending, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(pending) > 0 {
			return fmt.Errorf("%w: %s", ErrPending, strings.Join(pending, ", "))
		}
		res, err := tx.Exec(ctx, s.sql.delete, list)
		if err != nil {
			return err
		}
		deleted, err = res.RowsAffected()
		return err
	})
	if err != nil && !errors.Is(err, ErrPending) {
		return 0, err
	}
	return deleted, err
}

const sqliteDeleteProcessedSQL = `
			DELETE FROM outbox_events
			WHERE id IN (SELECT id FROM outbox_events WHERE processed_at < ?1 LIMIT ?2)`

// DeleteProcessed deletes up to limit rows processed before before, through
// the table's processed index (outbox_events_processed_idx).
func (s *sqliteStore) DeleteProcessed(ctx context.Context, before int64, limit int) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx sqlite.Tx) error {
		res, err := tx.Exec(ctx, s.sql.deleteProcessed, before, limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

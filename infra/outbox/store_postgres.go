package outbox

// The outbox's PostgreSQL dialect (pgx). The SQLite one (store_sqlite.go) has
// the same statements in SQLite's form.

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/postgres"
)

// pgStore is Store on PostgreSQL: appends in the caller's transaction, the
// operator commands, metrics and retention on the service's pool.
type pgStore struct {
	pool   *pgxpool.Pool
	sql    *pgStatements
	fanout fanout // WithRoutes, nil without
}

// pgStatements are the store's statements on its table, each built once per
// table (pgStatementsFor) from the text written beside its method.
type pgStatements struct {
	table           string
	append          string
	appendFanout    string
	settle          string
	backlog         string
	failed          string
	requeueAll      string
	requeueIDs      string
	deleteCheck     string
	delete          string
	deleteProcessed string
}

var pgStatementsByTable sync.Map // table → *pgStatements

func pgStatementsFor(table string) *pgStatements {
	if st, ok := pgStatementsByTable.Load(table); ok {
		return st.(*pgStatements)
	}
	st, _ := pgStatementsByTable.LoadOrStore(table, &pgStatements{
		table:           table,
		append:          onTable(pgAppendSQL, table),
		appendFanout:    onTable(pgAppendFanoutSQL, table),
		settle:          onTable(settleSQL, table),
		backlog:         onTable(pgBacklogSQL, table),
		failed:          onTable(pgFailedSQL, table),
		requeueAll:      onTable(pgRequeueSQL(`failed_at IS NOT NULL`), table),
		requeueIDs:      onTable(pgRequeueSQL(`id = ANY($2) AND failed_at IS NOT NULL`), table),
		deleteCheck:     onTable(pgDeleteCheckSQL, table),
		delete:          onTable(pgDeleteSQL, table),
		deleteProcessed: onTable(pgDeleteProcessedSQL, table),
	})
	return st.(*pgStatements)
}

var (
	_ DialectStore[postgres.Tx] = (*pgStore)(nil)
	_ RelayStore                = (*pgRelayStore)(nil)
	_ Listener                  = (*pgRelayStore)(nil)
)

// NewPostgresStore returns the outbox store of a PostgreSQL pool (its Append
// uses only the transaction it is handed: a nil pool does for appends alone),
// on DefaultTable or the table of WithTable.
func NewPostgresStore(pool *pgxpool.Pool, opts ...StoreOption) DialectStore[postgres.Tx] {
	o := optionsOf(opts)
	metricsFor(o.table)
	return &pgStore{pool: pool, sql: pgStatementsFor(o.table), fanout: fanoutOf(o.routes)}
}

func (s *pgStore) subscribersOf(tag string) []string { return s.fanout[tag] }

// Table is the store's outbox table.
func (s *pgStore) Table() string { return s.sql.table }

const pgAppendSQL = `
		INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, trace_context)
		VALUES ($1, $2, $3, $4, $4, 0, $5)`

// pgAppendFanoutSQL inserts the default subscriber's row and the further
// subscribers' ($6 their row ids, $7 their names, event_id $1) in one
// statement: one round trip whatever the number of subscribers.
const pgAppendFanoutSQL = `
		INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, trace_context, subscriber, event_id)
		SELECT $1::uuid, $2, $3::jsonb, $4::bigint, $4::bigint, 0, $5::jsonb, '', NULL
		UNION ALL
		SELECT d.id, $2, $3::jsonb, $4::bigint, $4::bigint, 0, $5::jsonb, d.subscriber, $1::uuid
		FROM unnest($6::uuid[], $7::text[]) AS d(id, subscriber)`

// Append inserts row in tx: the statement of old without further
// subscribers, so a one-subscriber setup pays nothing for fan-out.
func (s *pgStore) Append(ctx context.Context, tx postgres.Tx, row NewRow) error {
	if len(row.Deliveries) == 0 {
		_, err := tx.Exec(ctx, s.sql.append, row.ID, row.Tag, row.Payload, row.CreatedAt, row.Trace)
		return err
	}
	ids := make([]uuid.UUID, len(row.Deliveries))
	names := make([]string, len(row.Deliveries))
	for i, d := range row.Deliveries {
		ids[i], names[i] = d.ID, d.Subscriber
	}
	_, err := tx.Exec(ctx, s.sql.appendFanout, row.ID, row.Tag, row.Payload, row.CreatedAt, row.Trace, ids, names)
	return err
}

// pgRelayStore is one relay's statements, on connections of its own.
type pgRelayStore struct {
	pool     *pgxpool.Pool // the relay's own (ownPool)
	claimSQL string        // claimSQL(ClaimSize) on the table, one statement text per relay
	sql      *pgStatements
}

// OpenRelay opens the relay's own pool (see ownPool) and its claim statement.
func (s *pgStore) OpenRelay(claimSize int) (RelayStore, error) {
	own, err := ownPool(s.pool)
	if err != nil {
		return nil, fmt.Errorf("relay pool: %w", err)
	}
	return &pgRelayStore{pool: own, claimSQL: onTable(claimSQL(claimSize), s.sql.table), sql: s.sql}, nil
}

// Close closes the relay's pool, waiting no longer than ctx.
func (s *pgRelayStore) Close(ctx context.Context) { closeWithin(ctx, s.pool) }

// claimSQL is the claim statement of a relay whose ClaimSize is claimSize:
// it claims up to $4 rows (at most claimSize) in one statement. The inner
// select reads the partial index outbox_events_pending_idx (pending rows by
// created_at) from the floor $5 up, so it costs the same however many settled
// rows the table holds, vacuumed or not, as long as they lie below the floor. A
// claim is reclaimable when its lease expired, or when it lies more than twice
// its own lease (the claim_lease its claimer wrote) in the future: its
// claimer's clock ran ahead. Never by the reader's lease: a replica with a
// shorter one would take the live claims of a replica with a longer one. SKIP
// LOCKED lets relays claim side by side.
//
// Its shape is for the generic plan, the one a prepared statement is planned
// once with (the relay's connections force it, see ConnParams): whatever the
// parameters and the statistics, that plan must read the pending index and the
// primary key. The limit the planner sees is the literal claimSize, so it
// costs the index scan for that many rows, as a custom plan would; the rows
// this claim may take ($4, the free workers) are a second LIMIT above it,
// which stops the locking scan as soon as it has them. The update finds its
// rows by id = ANY(ARRAY(...)), whose estimate (a few rows, whatever the
// table's statistics say) keeps the primary key. The earlier form, a CTE with
// LIMIT $4 joined by UPDATE ... FROM, had a generic plan that guessed a tenth
// of the pending rows once the table was analyzed, and became a hash join over
// a sequential scan of the whole table (TestPlansStayOnIndexes).
//
// A row whose attempts are used up ($6) was claimed that many times and never
// settled the last time (its relay died or lost the database): it is
// dead-lettered here instead of claimed again, keeping attempts == $6, so a row
// that kills every process that takes it stops after MaxAttempts claims. Every
// other row gets the claim's token $7 and one more attempt.
//
// $1 now, $2 now + lease, $3 lease, $4 limit (1..claimSize), $5 floor
// (created_at), $6 max attempts, $7 claim token, $8 the relay's subscriber
// (its lane: only that subscriber's rows); epoch ms and ms.
func claimSQL(claimSize int) string {
	return `
UPDATE outbox_events o SET
	attempts      = CASE WHEN o.attempts >= $6::int THEN o.attempts ELSE o.attempts + 1 END,
	claimed_until = CASE WHEN o.attempts >= $6::int THEN NULL ELSE $2::bigint END,
	claim_token   = CASE WHEN o.attempts >= $6::int THEN NULL ELSE $7::uuid END,
	claim_lease   = CASE WHEN o.attempts >= $6::int THEN NULL ELSE $3::bigint END,
	failed_at     = CASE WHEN o.attempts >= $6::int THEN $1::bigint END,
	last_error    = CASE WHEN o.attempts >= $6
		THEN 'attempt ' || o.attempts || ' of ' || $6::int || ' was never settled (its relay died or lost the database while holding the claim); last error: ' || coalesce(o.last_error, 'none')
		ELSE o.last_error END
WHERE o.id = ANY(ARRAY(
	SELECT id FROM (
		SELECT id FROM outbox_events
		WHERE processed_at IS NULL AND failed_at IS NULL AND subscriber = $8::text
			AND created_at >= $5::bigint AND available_at <= $1::bigint
			AND (claimed_until IS NULL OR claimed_until < $1::bigint OR claimed_until > $1::bigint + 2 * claim_lease)
		ORDER BY created_at
		LIMIT ` + strconv.Itoa(claimSize) + `
		FOR UPDATE SKIP LOCKED
	) pending
	LIMIT $4::int
))
RETURNING o.id, coalesce(o.event_id, o.id), o.event_tag, o.payload, o.created_at, o.attempts, o.failed_at IS NOT NULL, o.trace_context`
}

// Claim runs the claim statement and reports each row it took.
func (s *pgRelayStore) Claim(ctx context.Context, a ClaimArgs, fn func(ClaimedRow)) error {
	rows, err := s.pool.Query(ctx, s.claimSQL, a.Now, a.Until, a.Lease, a.Limit, a.Floor, a.MaxAttempts, a.Token, a.Subscriber)
	if err != nil {
		return err
	}
	defer rows.Close()
	var trace []byte // one per claim, not per row; NULL scans as nil
	for rows.Next() {
		var c ClaimedRow
		// The payload is scanned as bytes: a json.RawMessage target would be
		// parsed here once more.
		if err := rows.Scan(&c.ID, &c.EventID, &c.Tag, &c.Payload, &c.CreatedAt, &c.Attempts, &c.Dead, &trace); err != nil {
			return err
		}
		if trace != nil {
			c.Trace = trace
		}
		fn(c)
	}
	return rows.Err()
}

// settleSQL settles a batch of outcomes in one statement. Each row is matched by
// primary key and claim token only: the token is never reused, so a relay whose
// lease ran out (and whose row was reclaimed, settled or requeued since)
// changes nothing, and the newer claim's outcome stands. The pending-state
// predicate is deliberately absent: it is the partial index's predicate, and
// with it the planner may scan that index and filter on id (a settle costing a
// scan of the backlog). The token is cleared, so replaying a flush whose commit
// answer was lost changes nothing either (a wait, which gives back the
// claim's attempt, gives it back once).
const settleSQL = `
UPDATE outbox_events o SET
	processed_at  = CASE WHEN u.kind = 'processed' THEN u.at ELSE o.processed_at END,
	failed_at     = CASE WHEN u.kind = 'failed' THEN u.at ELSE o.failed_at END,
	available_at  = CASE WHEN u.kind IN ('retry', 'wait') THEN u.at ELSE o.available_at END,
	attempts      = CASE WHEN u.kind = 'wait' THEN greatest(o.attempts - 1, 0) ELSE o.attempts END,
	last_error    = CASE WHEN u.kind IN ('retry', 'wait', 'failed') THEN u.err ELSE o.last_error END,
	claimed_until = NULL,
	claim_token   = NULL
FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::bigint[], $5::text[]) AS u(id, token, kind, at, err)
WHERE o.id = u.id AND o.claim_token = u.token
RETURNING o.id`

// Settle runs settleSQL over the batch's arrays.
func (s *pgRelayStore) Settle(ctx context.Context, batch []Settlement) (map[uuid.UUID]struct{}, error) {
	ids := make([]uuid.UUID, len(batch))
	tokens := make([]uuid.UUID, len(batch))
	kinds := make([]string, len(batch))
	ats := make([]int64, len(batch))
	errs := make([]*string, len(batch))
	for i, o := range batch {
		ids[i], tokens[i], kinds[i], ats[i], errs[i] = o.ID, o.Token, o.Kind, o.At, o.Err
	}
	if !isDurable(ctx) {
		return settleOn(ctx, s.pool, s.sql.settle, ids, tokens, kinds, ats, errs)
	}
	// Stop's flushes: this transaction's commit waits for its WAL flush (see
	// durable), the connection's synchronous_commit=off notwithstanding.
	var settled map[uuid.UUID]struct{}
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = on"); err != nil {
			return err
		}
		var err error
		settled, err = settleOn(ctx, tx, s.sql.settle, ids, tokens, kinds, ats, errs)
		return err
	})
	if err != nil {
		return nil, err
	}
	return settled, nil
}

// settleOn runs settle (settleSQL on the table) on q and collects the ids it
// settled.
func settleOn(ctx context.Context, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, settle string, ids, tokens []uuid.UUID, kinds []string, ats []int64, errs []*string) (map[uuid.UUID]struct{}, error) {
	rows, err := q.Query(ctx, settle, ids, tokens, kinds, ats, errs)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	settled := make(map[uuid.UUID]struct{}, len(ids))
	for rows.Next() {
		var id uuid.UUID
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		settled[id] = struct{}{}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return settled, nil
}

// Listen holds a dedicated connection (outside the pool, from the pool's
// connection settings) that LISTENs on the table's channel (its name, see
// WithTable) and reports each
// notification, and broadcasts this process's Nudges on the same connection
// (pg_notify after the appending commit, folded while one is in flight).
func (s *pgRelayStore) Listen(ctx context.Context, hooks ListenHooks) error {
	session, end := context.WithCancel(ctx)
	defer end()
	connectCtx, cancel := context.WithTimeout(session, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(connectCtx, s.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(closeCtx) // the connection is dropped either way
	}()
	// A broadcast is a hint: it need not wait for its commit to reach disk.
	if _, err := conn.Exec(connectCtx, "SET synchronous_commit = off"); err != nil {
		return err
	}
	// The table name is a checked identifier (tableOf): it needs no quoting.
	if _, err := conn.Exec(connectCtx, "LISTEN "+s.sql.table); err != nil {
		return err
	}
	hooks.Connected()
	self := conn.PgConn().PID()

	// A connection runs one command at a time: a broadcast request interrupts
	// the wait for notifications (a cancelled wait leaves the connection usable).
	var (
		mu         sync.Mutex
		cancelWait context.CancelFunc
		send       atomic.Bool
	)
	go func() {
		for {
			select {
			case <-session.Done():
				return
			case <-hooks.Broadcast:
			}
			send.Store(true)
			mu.Lock()
			if cancelWait != nil {
				cancelWait()
			}
			mu.Unlock()
		}
	}()
	for {
		if send.Swap(false) {
			if _, err := conn.Exec(session, "SELECT pg_notify($1, '')", s.sql.table); err != nil {
				return err
			}
		}
		mu.Lock()
		wait, stop := context.WithCancel(session)
		cancelWait = stop
		mu.Unlock()
		if send.Load() {
			stop()
			continue
		}
		n, err := conn.WaitForNotification(wait)
		stop()
		switch {
		case err == nil:
			hooks.Notified(n.Payload, n.PID == self)
		case wait.Err() != nil && session.Err() == nil && !conn.IsClosed():
			// Interrupted for a broadcast.
		default:
			return err
		}
	}
}

const pgBacklogSQL = `
		SELECT (SELECT min(created_at) FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL),
		       (SELECT count(*) FROM outbox_events WHERE failed_at IS NOT NULL),
		       (SELECT count(*) FROM (SELECT 1 FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL
		                              LIMIT ` + pendingRowsCapSQL + `) AS pending)`

// Backlog reads the oldest pending row and the failed count, through the
// partial indexes (a min over the pending one, a count over the failed one).
func (s *pgStore) Backlog(ctx context.Context) (*int64, int64, error) {
	b, err := s.backlog(ctx)
	return b.oldest, b.failed, err
}

// backlog is Backlog with the pending rows counted too, at most
// PendingRowsCap of them through the pending index.
func (s *pgStore) backlog(ctx context.Context) (backlog, error) {
	var b backlog
	err := s.pool.QueryRow(ctx, s.sql.backlog).Scan(&b.oldest, &b.failed, &b.pending)
	return b, err
}

const pgFailedSQL = `
		SELECT id, event_tag, attempts, failed_at, coalesce(last_error, ''), subscriber
		FROM outbox_events WHERE failed_at IS NOT NULL
		ORDER BY failed_at, id`

// Failed lists the dead letter.
func (s *pgStore) Failed(ctx context.Context) ([]FailedRow, error) {
	rows, err := s.pool.Query(ctx, s.sql.failed)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (FailedRow, error) {
		var f FailedRow
		err := row.Scan(&f.ID, &f.Tag, &f.Attempts, &f.FailedAt, &f.LastError, &f.Subscriber)
		return f, err
	})
}

// pgRequeueSQL is the requeue of the failed rows that where selects.
func pgRequeueSQL(where string) string {
	return `
			WITH u AS (
				UPDATE outbox_events
				SET failed_at = NULL, attempts = 0, available_at = $1, claimed_until = NULL, claim_token = NULL
				WHERE ` + where + `
				RETURNING created_at)
			SELECT count(*), min(created_at) FROM u`
}

// Requeue requeues the matching rows and, in the same transaction, notifies
// the relays of the table of the lowest created_at among them (delivered at
// the commit, never for a rolled-back requeue).
func (s *pgStore) Requeue(ctx context.Context, ids []uuid.UUID, all bool, now int64) (int64, error) {
	stmt, args := s.sql.requeueAll, []any{now}
	if !all {
		stmt = s.sql.requeueIDs
		args = append(args, ids)
	}
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		var lowest *int64
		err := tx.QueryRow(ctx, stmt, args...).Scan(&n, &lowest)
		if err != nil || lowest == nil {
			return err
		}
		_, err = tx.Exec(ctx, `SELECT pg_notify($1, $2)`, s.sql.table, requeuedPayload(*lowest))
		return err
	})
	return n, err
}

const (
	pgDeleteCheckSQL = `
			SELECT id, processed_at IS NULL AND failed_at IS NULL
			FROM outbox_events WHERE id = ANY($1)
			ORDER BY id
			FOR UPDATE`
	pgDeleteSQL = `
			DELETE FROM outbox_events
			WHERE id = ANY($1) AND (processed_at IS NOT NULL OR failed_at IS NOT NULL)`
)

// Delete locks every named row (in id order, so two deletes cannot deadlock)
// so that none changes state between the check and the delete.
func (s *pgStore) Delete(ctx context.Context, ids []uuid.UUID) (int64, error) {
	var deleted int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, s.sql.deleteCheck, ids)
		if err != nil {
			return err
		}
		var pending []string
		var id uuid.UUID
		var isPending bool
		_, err = pgx.ForEachRow(rows, []any{&id, &isPending}, func() error {
			if isPending {
				pending = append(pending, id.String())
			}
			return nil
		})
		if err != nil {
			return err
		}
		if len(pending) > 0 {
			return fmt.Errorf("%w: %s", ErrPending, strings.Join(pending, ", "))
		}
		tag, err := tx.Exec(ctx, s.sql.delete, ids)
		if err != nil {
			return err
		}
		deleted = tag.RowsAffected()
		return nil
	})
	return deleted, err
}

const pgDeleteProcessedSQL = `
		DELETE FROM outbox_events
		WHERE id IN (
			SELECT id FROM outbox_events
			WHERE processed_at < $1
			LIMIT $2
		)`

// DeleteProcessed deletes a chunk of processed rows: the inner select reads
// the table's processed index (outbox_events_processed_idx); the LIMIT keeps
// each statement's locks short on a large table.
func (s *pgStore) DeleteProcessed(ctx context.Context, before int64, limit int) (int64, error) {
	tag, err := s.pool.Exec(ctx, s.sql.deleteProcessed, before, limit)
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

package outbox

import (
	"context"
	"fmt"
	"regexp"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// Store is the outbox's statements on one SQL dialect that run on their own:
// the seam between the relay, settler, metrics, retention and operator
// commands (written once, here) and each dialect's SQL (store_postgres.go,
// store_sqlite.go). Both pass the same conformance table (store_test.go).
type Store interface {
	// Table is the outbox table the store works on (DefaultTable unless
	// built WithTable).
	Table() string
	// Backlog is the oldest pending row's created_at (nil when none) and the
	// number of failed rows, read through the partial indexes.
	Backlog(ctx context.Context) (oldest *int64, failed int64, err error)
	// Failed lists the dead-lettered rows, oldest failure first.
	Failed(ctx context.Context) ([]FailedRow, error)
	// Requeue makes the failed rows among ids (every failed row when all)
	// pending again, available at now, attempts 0, no claim token, and tells
	// the relays that listen, at the commit. It returns how many it changed.
	Requeue(ctx context.Context, ids []uuid.UUID, all bool, now int64) (int64, error)
	// Delete deletes the rows named by ids if none is pending, in one
	// transaction; with a pending one it deletes nothing and returns an error
	// wrapping ErrPending that names them.
	Delete(ctx context.Context, ids []uuid.UUID) (int64, error)
	// DeleteProcessed deletes at most limit rows processed before before.
	DeleteProcessed(ctx context.Context, before int64, limit int) (int64, error)
	// OpenRelay returns the statements of one relay whose ClaimSize is
	// claimSize, on connections it may keep for itself (closed by Close).
	OpenRelay(claimSize int) (RelayStore, error)
}

// Appender is the outbox's one statement that runs in its caller's
// transaction, on one dialect: TX is that dialect's executor (postgres.Tx,
// sqlite.Tx), so a store can only be handed a transaction of its own dialect.
type Appender[TX any] interface {
	// Table is the outbox table Append inserts into.
	Table() string
	// Append inserts row as a pending outbox row inside tx: the row exists if
	// and only if tx commits.
	Append(ctx context.Context, tx TX, row NewRow) error
}

// DialectStore is the outbox store of one dialect: its own statements and
// the append in a transaction of that dialect.
type DialectStore[TX any] interface {
	Store
	Appender[TX]
}

// NewRow is one row Append inserts.
type NewRow struct {
	ID        uuid.UUID
	Tag       string
	Payload   []byte // JSON
	CreatedAt int64  // epoch ms; also available_at
	Trace     []byte // JSON trace context, nil when untraced
	// Deliveries are the rows of the event's further subscribers (a store
	// built WithRoutes): each its own row, inserted in the same transaction,
	// with subscriber set and event_id = ID. The row of ID itself is the
	// default subscriber's (subscriber '', event_id NULL).
	Deliveries []Delivery
}

// Delivery is one further subscriber's row of an appended event.
type Delivery struct {
	ID         uuid.UUID // the row's own id (a fresh UUIDv7)
	Subscriber string    // the subscriber's name (Route.Subscriber)
}

// RelayStore is the statements one relay runs: its claims and its settles.
type RelayStore interface {
	// Claim claims up to args.Limit rows in one statement (see ClaimArgs):
	// each gets the token, one more attempt and the lease, except a row whose
	// attempts are used up, which is dead-lettered instead (Dead). It calls
	// fn for each row the statement took.
	Claim(ctx context.Context, args ClaimArgs, fn func(ClaimedRow)) error
	// Settle applies a batch of settlements in one transaction, each matched
	// by id and claim token only (a fenced one changes nothing), clearing the
	// token and the lease; it returns the ids it changed.
	Settle(ctx context.Context, batch []Settlement) (map[uuid.UUID]struct{}, error)
	// Close closes the relay's connections, waiting no longer than ctx.
	Close(ctx context.Context)
}

// ClaimArgs are one claim's parameters (epoch ms and ms).
type ClaimArgs struct {
	Now         int64
	Until       int64 // Now + Lease
	Lease       int64
	Limit       int
	Floor       int64 // created_at from which the claim scans
	MaxAttempts int
	Token       uuid.UUID
	Subscriber  string // only rows of this subscriber ('' the default one)
}

// ClaimedRow is one row a claim took.
type ClaimedRow struct {
	ID        uuid.UUID
	EventID   uuid.UUID // coalesce(event_id, id): the id every subscriber receives
	Tag       string
	Payload   []byte
	CreatedAt int64
	Attempts  int
	Dead      bool   // dead-lettered by this claim (attempts used up)
	Trace     []byte // nil when NULL
}

// Settlement is one outcome to record.
type Settlement struct {
	ID    uuid.UUID
	Token uuid.UUID
	// Kind is processed, retry, failed, release or wait; a wait sets
	// available_at like a retry, and gives back the attempt the claim took
	// (attempts one less, never below 0).
	Kind string
	At   int64 // processed_at, available_at or failed_at, by kind
	Err  *string
}

// Listener is a RelayStore whose relays can wake each other (PostgreSQL's
// LISTEN/NOTIFY). A store without it leaves Config.Notify without effect: a
// relay finds other processes' rows at its next poll.
type Listener interface {
	// Listen holds a session that calls hooks.Notified for each notification
	// and broadcasts one whenever hooks.Broadcast fires, until ctx ends or the
	// session fails (its error is returned; the relay retries).
	Listen(ctx context.Context, hooks ListenHooks) error
}

// ListenHooks connect a Listen session to its relay.
type ListenHooks struct {
	Connected func()                              // the session listens (again)
	Notified  func(payload string, fromSelf bool) // one notification
	Broadcast <-chan struct{}                     // a Nudge to pass on
}

// Settlement kinds.
const (
	KindProcessed = string(kindProcessed)
	KindRetry     = string(kindRetry)
	KindFailed    = string(kindFailed)
	KindRelease   = string(kindRelease)
	KindWait      = string(kindWait)
)

// NewStore returns the outbox store of db's dialect (database.Pick): db must
// be the DB infra/database opened. Without options it works on DefaultTable.
func NewStore(db sqldb.DB, opts ...StoreOption) Store {
	return database.Pick(db, database.Dialects[Store]{
		Postgres: func(db *postgres.DB) Store { return NewPostgresStore(db.Pool, opts...) },
		SQLite:   func(db *sqlite.DB) Store { return NewSQLiteStore(db, opts...) },
	})
}

// DefaultTable is the outbox table of a store built without WithTable:
// labeling's, outbox_events. Its LISTEN/NOTIFY channel, its retention policy
// and its metric names are the ones labeling always had.
const DefaultTable = "outbox_events"

// StoreOption is a setting of a store, fixed at its construction.
type StoreOption func(*storeOptions)

type storeOptions struct {
	table  string
	routes []Route
}

// tableName is what a table name must be: a lowercase SQL identifier that
// needs no quoting, short enough that the migration's index names
// (TABLE_pending_idx) stay within PostgreSQL's 63 bytes.
var tableName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)

// WithTable makes a store work on table instead of DefaultTable: another
// service's outbox in a database it may share (contract section 2), such as
// billing's billing_outbox_events. The table must have exactly the columns and
// indexes of outbox_events (a migration of its service creates it). Every
// statement names the table, the LISTEN/NOTIFY channel is the table's name
// (so relays of one table never wake those of another), the retention policy
// is named after it, and the metrics take a prefix of their own (see
// NewBacklogCollector). name must be a constant of the program, never input:
// the store is built with it in its SQL, so a name that is not a lowercase
// identifier (tableName) panics at construction.
func WithTable(name string) StoreOption { return func(o *storeOptions) { o.table = name } }

// tableOf applies opts and checks the table name.
func tableOf(opts []StoreOption) string { return optionsOf(opts).table }

// optionsOf applies opts and checks the table name.
func optionsOf(opts []StoreOption) storeOptions {
	o := storeOptions{table: DefaultTable}
	for _, opt := range opts {
		opt(&o)
	}
	if !tableName.MatchString(o.table) {
		panic(fmt.Sprintf("outbox: table name %q is not a lowercase SQL identifier of at most 48 characters (%s)", o.table, tableName))
	}
	return o
}

// defaultWord is the table name as the statements are written beside their
// methods: valid SQL on DefaultTable, rewritten once per table (onTable).
var defaultWord = regexp.MustCompile(`\b` + DefaultTable + `\b`)

// onTable is stmt on table: every occurrence of the word outbox_events, the
// only name the statements hold, replaced by table (a checked identifier).
func onTable(stmt, table string) string {
	if table == DefaultTable {
		return stmt
	}
	return defaultWord.ReplaceAllLiteralString(stmt, table)
}

package inbox

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// Store is the inbox's statements that run in a transaction of their own, on
// one SQL dialect (store_postgres.go, store_sqlite.go), on the consumer's
// tables.
type Store interface {
	// DeleteReceipts deletes at most limit receipts created before before
	// (epoch ms) and returns how many: the retention of the receipts table.
	DeleteReceipts(ctx context.Context, before int64, limit int) (int64, error)
	// ListNATSFailed returns every terminated message, in the order recorded,
	// payloads included: for tests and small tables; a listing pages
	// (PageNATSFailed).
	ListNATSFailed(ctx context.Context) ([]NATSFailed, error)
	// PageNATSFailed returns up to limit records with an id above after,
	// oldest first, without their payload and signature (Payload and
	// Signature nil): a listing's page, whatever the payloads weigh.
	PageNATSFailed(ctx context.Context, after int64, limit int) ([]NATSFailed, error)
	// NATSFailedSize is how many records there are and their payloads'
	// bytes, read from the tally the table's triggers keep (one row, no scan).
	NATSFailedSize(ctx context.Context) (rows, bytes int64, err error)
	// OldestNATSFailed returns up to limit records with an id above after,
	// oldest first, payloads included (a replay's batch).
	OldestNATSFailed(ctx context.Context, after int64, limit int) ([]NATSFailed, error)
	// NATSFailedByID returns the records of ids that exist, oldest first,
	// payloads included.
	NATSFailedByID(ctx context.Context, ids []int64) ([]NATSFailed, error)
	// OldestUnverifiedNATSFailed returns up to limit records with an id above
	// after that were not verified when recorded, oldest first, payloads
	// included: through the partial index of the unverified records, so it
	// never reads a verified one.
	OldestUnverifiedNATSFailed(ctx context.Context, after int64, limit int) ([]NATSFailed, error)
}

// TxStore is the inbox's statements that run in their caller's transaction:
// TX is the dialect's executor (postgres.Tx, sqlite.Tx), so a transaction of
// the other dialect does not compile.
type TxStore[TX any] interface {
	// InsertNATSFailed records a terminated message once (keyed by stream_seq
	// and stored_at).
	InsertNATSFailed(ctx context.Context, tx TX, f NATSFailed) error
	// DeleteNATSFailed deletes the records ids that are still there and
	// returns how many it deleted.
	DeleteNATSFailed(ctx context.Context, tx TX, ids ...int64) (int64, error)
	// SetNATSFailedReason replaces the reason of the record id, if it is still there.
	SetNATSFailedReason(ctx context.Context, tx TX, id int64, reason string) error
	// MarkNATSFailedVerified marks the records ids verified.
	MarkNATSFailedVerified(ctx context.Context, tx TX, ids []int64) error
}

// DialectStore is the inbox store of one dialect.
type DialectStore[TX any] interface {
	Store
	TxStore[TX]
}

// tables are a consumer's table names, checked identifiers: natsSize is the
// NATSFailed table's tally (its name with "_size"), kept by its triggers.
type tables struct{ receipts, natsFailed, natsSize string }

// newTables returns a consumer's table names.
func newTables(receipts, natsFailed string) tables {
	return tables{receipts: receipts, natsFailed: natsFailed, natsSize: natsFailed + "_size"}
}

// recordTx is the dead-letter statements of one transaction, bound to it.
type recordTx interface {
	InsertNATSFailed(ctx context.Context, f NATSFailed) error
	DeleteNATSFailed(ctx context.Context, ids ...int64) (int64, error)
	SetNATSFailedReason(ctx context.Context, id int64, reason string) error
	MarkNATSFailedVerified(ctx context.Context, ids []int64) error
}

// applyFunc applies events (distinct ids) in one transaction and returns the
// ids whose receipt is new; beforeCommit, when not nil, runs between the
// writes and the commit.
type applyFunc[V any] func(ctx context.Context, events []Event[V], now int64, beforeCommit func() error) (map[uuid.UUID]bool, error)

// dialect is the inbox's statements on one dialect, picked once (New).
type dialect[V any] struct {
	store Store
	apply applyFunc[V]
	write func(ctx context.Context, fn func(recordTx) error) error
}

// bind picks db's dialect: the only place the executors are named.
func bind[V any](db sqldb.DB, c *Consumer[V]) dialect[V] {
	t := newTables(c.Receipts, c.NATSFailed)
	return database.Pick(db, database.Dialects[dialect[V]]{
		Postgres: func(d *postgres.DB) dialect[V] {
			s := pgStore{pool: d.Pool, t: t}
			apply := pgFuncApply(d, s, c.Effect.Func)
			if c.Effect.fastPath() {
				apply = pgApply(d, s, c.Effect.Postgres)
			}
			return dialect[V]{store: s, apply: apply, write: writer[postgres.Tx](d, s)}
		},
		SQLite: func(d *sqlite.DB) dialect[V] {
			s := sqliteStore{db: d, t: t}
			effect := c.Effect.SQLite
			if effect == nil {
				effect = sqliteFunc(c.Effect.Func)
			}
			return dialect[V]{store: s, apply: sqliteApply(d, s, effect), write: writer[sqlite.Tx](d, s)}
		},
	})
}

// writer runs fn in a write transaction of db with the dead-letter
// statements bound to it.
func writer[TX any](db sqldb.Transactor[TX], s TxStore[TX]) func(ctx context.Context, fn func(recordTx) error) error {
	return func(ctx context.Context, fn func(recordTx) error) error {
		return db.InTx(ctx, sqldb.TxOptions{}, func(tx TX) error { return fn(txBound[TX]{tx: tx, s: s}) })
	}
}

// txBound is recordTx on one transaction of the dialect TX.
type txBound[TX any] struct {
	tx TX
	s  TxStore[TX]
}

func (b txBound[TX]) InsertNATSFailed(ctx context.Context, f NATSFailed) error {
	return b.s.InsertNATSFailed(ctx, b.tx, f)
}

func (b txBound[TX]) DeleteNATSFailed(ctx context.Context, ids ...int64) (int64, error) {
	return b.s.DeleteNATSFailed(ctx, b.tx, ids...)
}

func (b txBound[TX]) MarkNATSFailedVerified(ctx context.Context, ids []int64) error {
	return b.s.MarkNATSFailedVerified(ctx, b.tx, ids)
}

func (b txBound[TX]) SetNATSFailedReason(ctx context.Context, id int64, reason string) error {
	return b.s.SetNATSFailedReason(ctx, b.tx, id, reason)
}

// NewStore returns the inbox store of db's dialect on the consumer's tables
// (receipts, natsFailed: checked as Consumer's are; a bad name panics): what
// an operator command reads without an Inbox.
func NewStore(db sqldb.DB, receipts, natsFailed string) Store {
	return database.Pick(db, database.Dialects[Store]{
		Postgres: func(d *postgres.DB) Store { return NewPostgresStore(d.Pool, receipts, natsFailed) },
		SQLite:   func(d *sqlite.DB) Store { return NewSQLiteStore(d, receipts, natsFailed) },
	})
}

// NewPostgresStore returns the inbox store of a PostgreSQL pool on a
// consumer's tables; a name that is no lower-case SQL identifier panics.
func NewPostgresStore(pool *pgxpool.Pool, receipts, natsFailed string) DialectStore[postgres.Tx] {
	return pgStore{pool: pool, t: mustTables(receipts, natsFailed)}
}

// mustTables checks a consumer's table names: they are written into SQL.
func mustTables(receipts, natsFailed string) tables {
	for _, n := range []string{receipts, natsFailed} {
		if !identifier.MatchString(n) {
			panic(fmt.Sprintf("inbox: %q is not a lower-case SQL identifier", n))
		}
	}
	return newTables(receipts, natsFailed)
}

// NewSQLiteStore returns the inbox store of a SQLite database on a
// consumer's tables; a name that is no lower-case SQL identifier panics.
func NewSQLiteStore(db *sqlite.DB, receipts, natsFailed string) DialectStore[sqlite.Tx] {
	return sqliteStore{db: db, t: mustTables(receipts, natsFailed)}
}

// sigBytes is the signature column's value: NULL for none, bytes (possibly
// empty: an unsigned message) otherwise.
func sigBytes(s *string) any {
	if s == nil {
		return nil
	}
	return []byte(*s)
}

// sigString reads the signature column back: nil for NULL.
func sigString(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

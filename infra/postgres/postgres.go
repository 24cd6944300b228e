// Package postgres opens a service's connection pool and applies its migrations.
// Both services use it; each passes its own database URL and migration set.
package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/exaring/otelpgx"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/database"
	"github.com/pressly/goose/v3/lock"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/migrations"
)

// DefaultMaxConns is the pool size when the URL sets no pool_max_conns: room for
// the HTTP handlers and the retention. The outbox relay opens connections of its
// own from this pool's settings (infra/outbox, at most three and one for
// LISTEN), so neither waits for the other's; pgx's own default (4, or the CPU
// count) is too few for the handlers of a busy service.
const DefaultMaxConns = 12

// The bounds of the idle-in-transaction timeout. No use case waits on anything
// but the database between two statements of a transaction, so a gap of a
// second is already abnormal; the ceiling keeps a long statement timeout from
// letting a lock outlive a partition by as long.
const (
	minIdleInTransaction = time.Second
	maxIdleInTransaction = 5 * time.Second
)

// IdleInTransactionTimeout is the idle_in_transaction_session_timeout of a pool
// whose statement_timeout is statement: a transaction left idle longer than one
// of its statements may run is abandoned, within 1 s to 5 s.
func IdleInTransactionTimeout(statement time.Duration) time.Duration {
	return min(max(statement, minIdleInTransaction), maxIdleInTransaction)
}

// Isolation is the isolation level every connection is pinned to. The use cases
// rely on READ COMMITTED: a create that meets a concurrent insert of the same id
// re-reads the row in a new statement, which a REPEATABLE READ snapshot (a server
// default some operators set) would turn into a serialization failure.
const Isolation = "read committed"

// Open parses url and returns a pool pinned to Isolation. It does not wait for the
// database: a service may start while its database is still coming up, and /readyz
// tells when it answers.
func Open(ctx context.Context, url string, opts ...Option) (*pgxpool.Pool, error) {
	return OpenBounded(ctx, url, sqldb.Bounds{}, opts...)
}

// Option changes how a pool is opened.
type Option func(*options)

type options struct{ traced bool }

// Traced makes each statement run under a traced context a child span when
// on (never a root: the relay's polls make no traces). The caller says so
// (database.Module from the app's *telemetry.Provider), so no opener reads
// the global provider; off, no tracer is set and a statement costs nothing
// more.
func Traced(on bool) Option { return func(o *options) { o.traced = on } }

// OpenBounded is Open with b set on every connection: statement_timeout and
// lock_timeout (0 leaves the server's setting). A statement or a lock wait
// over its bound fails with a PostgreSQL error that Unavailable reports, so
// the caller answers 503 instead of waiting for ever. A bounded pool also ends
// abandoned transactions: idle_in_transaction_session_timeout is
// IdleInTransactionTimeout(b.StatementTimeout), so a transaction whose client
// went away (a partition cut it between two statements) releases its locks
// within seconds of the cut, not when TCP finally notices.
func OpenBounded(ctx context.Context, url string, b sqldb.Bounds, opts ...Option) (*pgxpool.Pool, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("parse database url: %w", err)
	}
	if !strings.Contains(url, "pool_max_conns") {
		cfg.MaxConns = max(cfg.MaxConns, DefaultMaxConns)
	}
	// A dead connection (database restarted, backend terminated) is found and
	// replaced quickly instead of failing a stream of queries.
	cfg.HealthCheckPeriod = 5 * time.Second
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	// Startup parameters: they win over per-database and per-role defaults.
	if cfg.ConnConfig.RuntimeParams == nil {
		cfg.ConnConfig.RuntimeParams = map[string]string{}
	}
	params := cfg.ConnConfig.RuntimeParams
	params["default_transaction_isolation"] = Isolation
	if b.StatementTimeout > 0 {
		params["statement_timeout"] = strconv.FormatInt(b.StatementTimeout.Milliseconds(), 10)
		params["idle_in_transaction_session_timeout"] = strconv.FormatInt(IdleInTransactionTimeout(b.StatementTimeout).Milliseconds(), 10)
	}
	if b.LockTimeout > 0 {
		params["lock_timeout"] = strconv.FormatInt(b.LockTimeout.Milliseconds(), 10)
	}
	if o.traced {
		cfg.ConnConfig.Tracer = otelpgx.NewTracer(otelpgx.WithDisableAcquireTracer()) // span named by the statement's first word (the default)
	}
	cfg.AfterConnect = afterConnect(cfg.AfterConnect)
	return pgxpool.NewWithConfig(ctx, cfg)
}

// Migrate applies every pending migration of set under a Postgres session lock, so
// replicas that start together migrate once, and records them in set.Table, so
// the two services may share one database. The first time a database has no
// set.Table it adopts the set's rows of an earlier goose_db_version (adoptLegacy),
// under the same lock, so nothing is applied twice. It never touches goose's
// global state.
func Migrate(ctx context.Context, pool *pgxpool.Pool, set migrations.Set, logger *slog.Logger) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return migrateDB(ctx, db, set, logger)
}

// MigrateURL is Migrate for a database the caller has no pool for.
func MigrateURL(ctx context.Context, url string, set migrations.Set, logger *slog.Logger) error {
	pool, err := Open(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	return Migrate(ctx, pool, set, logger)
}

func migrateDB(ctx context.Context, db *sql.DB, set migrations.Set, logger *slog.Logger) error {
	if set.Table == "" || set.Marker == "" {
		return errors.New("migrations: the set names no version table or marker")
	}
	versions, err := setVersions(set)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	// goose's own lock id, so a replica of an older build (which locked it to
	// write goose_db_version) is excluded too. Retried every second (goose's
	// default is every 5 s): each start takes it twice, to adopt and to migrate;
	// the caller's ctx bounds the wait.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 300))
	if err != nil {
		return err
	}
	if err := adoptLocked(ctx, db, locker, set, versions, logger); err != nil {
		return fmt.Errorf("migrations: adopt %s: %w", migrations.LegacyTable, err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, set,
		goose.WithSessionLocker(locker),
		goose.WithTableName(set.Table),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return migrations.Up(ctx, provider, logger)
}

// setVersions are the goose versions of set's files, and 0, the row goose
// writes when it creates a version table.
func setVersions(set migrations.Set) ([]int64, error) {
	names, err := fs.Glob(set, "*.sql")
	if err != nil {
		return nil, err
	}
	versions := []int64{0}
	for _, name := range names {
		v, err := goose.NumericComponent(name)
		if err != nil {
			return nil, err
		}
		versions = append(versions, v)
	}
	return versions, nil
}

// adoptLocked runs adoptLegacy under the migration lock, on a connection of its
// own that holds it. Each replica adopts before goose first looks at set.Table
// (goose creates it, empty, on that first look, outside its lock), so the
// first replica to take the lock adopts and every later one finds the table.
func adoptLocked(ctx context.Context, db *sql.DB, locker lock.SessionLocker, set migrations.Set, versions []int64, logger *slog.Logger) error {
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := locker.SessionLock(ctx, conn); err != nil {
		return err
	}
	// Unlocked before the connection goes back to the pool, whatever ctx is:
	// a pooled connection still holding the lock would block every migration.
	err = adoptLegacy(ctx, conn, set, versions, logger)
	return errors.Join(err, locker.SessionUnlock(context.WithoutCancel(ctx), conn))
}

// adoptLegacy creates set.Table from the rows of goose_db_version whose versions
// are the set's, when set.Table does not exist yet, goose_db_version does, and
// set.Marker exists. Both services used to record their versions, which share
// numbers, in that one table; only one of them can have used a given database's
// (the other then failed or skipped its migrations), and the marker, created by
// a set's first migration alone, says whether it was this one. Otherwise it
// does nothing and goose starts set.Table afresh. The old table is kept: the
// other service may still have to adopt it, and an operator drops it.
func adoptLegacy(ctx context.Context, conn *sql.Conn, set migrations.Set, versions []int64, logger *slog.Logger) error {
	var own, legacy, marker bool
	err := conn.QueryRowContext(ctx, `
		SELECT to_regclass(quote_ident($1)) IS NOT NULL,
		       to_regclass(quote_ident($2)) IS NOT NULL,
		       to_regclass(quote_ident($3)) IS NOT NULL`,
		set.Table, migrations.LegacyTable, set.Marker).Scan(&own, &legacy, &marker)
	if err != nil || own || !legacy || !marker {
		return err
	}
	store, err := database.NewStore(database.DialectPostgres, set.Table)
	if err != nil {
		return err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after the commit
	if err := store.CreateVersionTable(ctx, tx); err != nil {
		return err
	}
	// In id order, so goose reads the history as it was written.
	res, err := tx.ExecContext(ctx, `
		INSERT INTO `+quoteIdent(set.Table)+` (version_id, is_applied, tstamp)
		SELECT version_id, is_applied, tstamp FROM `+quoteIdent(migrations.LegacyTable)+`
		WHERE version_id = ANY($1) ORDER BY id`, versions)
	if err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	if logger != nil {
		n, _ := res.RowsAffected()
		logger.Info("migrations: adopted the earlier version table", "from", migrations.LegacyTable, "to", set.Table, "rows", n)
	}
	return nil
}

// quoteIdent quotes a table name for SQL; the names are the sets' constants.
func quoteIdent(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// Unavailable reports whether err means the database could not be reached or the
// connection broke, as opposed to a statement that the database refused. Callers map
// it to 503 so that a sender retries.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		// Class 08: connection exception; 57P01..57P03: admin shutdown, crash
		// shutdown, cannot connect now; 53300: too many connections; 57014 and
		// 55P03: statement_timeout and lock_timeout (the database is too busy for
		// this request now; a retry later may pass).
		switch {
		case len(pgErr.Code) == 5 && pgErr.Code[:2] == "08",
			pgErr.Code == "57P01", pgErr.Code == "57P02", pgErr.Code == "57P03",
			pgErr.Code == "53300", pgErr.Code == "57014", pgErr.Code == "55P03":
			return true
		}
		return false
	}
	if errors.Is(err, context.Canceled) {
		return false
	}
	// Anything that never got a server answer: dial errors, timeouts, closed pool.
	return pgconn.SafeToRetry(err) || pgconn.Timeout(err) || isNetError(err)
}

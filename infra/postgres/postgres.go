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
	"github.com/pressly/goose/v3/lock"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/telemetry"
)

// DefaultMaxConns is the pool size when the URL sets no pool_max_conns: room for
// the HTTP handlers and the retention. The outbox relay opens connections of its
// own from this pool's settings (infra/outbox, at most three and one for
// LISTEN), so neither waits for the other's; pgx's own default (4, or the CPU
// count) is too few for the handlers of a busy service.
const DefaultMaxConns = 12

// Bounds are the limits every pooled connection starts with (0 leaves the server's
// setting). A statement or a lock wait over its bound fails with a PostgreSQL error
// that Unavailable reports, so the caller answers 503 instead of waiting for ever.
type Bounds struct {
	StatementTimeout time.Duration // statement_timeout
	LockTimeout      time.Duration // lock_timeout
}

// Isolation is the isolation level every connection is pinned to. The use cases
// rely on READ COMMITTED: a create that meets a concurrent insert of the same id
// re-reads the row in a new statement, which a REPEATABLE READ snapshot (a server
// default some operators set) would turn into a serialization failure.
const Isolation = "read committed"

// Open parses url and returns a pool pinned to Isolation. It does not wait for the
// database: a service may start while its database is still coming up, and /readyz
// tells when it answers.
func Open(ctx context.Context, url string) (*pgxpool.Pool, error) {
	return OpenBounded(ctx, url, Bounds{})
}

// OpenBounded is Open with b set on every connection.
func OpenBounded(ctx context.Context, url string, b Bounds) (*pgxpool.Pool, error) {
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
	}
	if b.LockTimeout > 0 {
		params["lock_timeout"] = strconv.FormatInt(b.LockTimeout.Milliseconds(), 10)
	}
	if telemetry.Enabled() {
		// Each statement run under a traced context is a child span (never a
		// root: the relay's polls make no traces). Without tracing no tracer is
		// set, so a statement costs nothing more.
		cfg.ConnConfig.Tracer = otelpgx.NewTracer(otelpgx.WithDisableAcquireTracer()) // span named by the statement's first word (the default)
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}

// Migrate applies every pending migration of fsys under a Postgres session lock, so
// replicas that start together migrate once. It never touches goose's global state.
func Migrate(ctx context.Context, pool *pgxpool.Pool, fsys fs.FS, logger *slog.Logger) error {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	return migrateDB(ctx, db, fsys, logger)
}

// MigrateURL is Migrate for a database the caller has no pool for.
func MigrateURL(ctx context.Context, url string, fsys fs.FS, logger *slog.Logger) error {
	pool, err := Open(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	return Migrate(ctx, pool, fsys, logger)
}

func migrateDB(ctx context.Context, db *sql.DB, fsys fs.FS, logger *slog.Logger) error {
	locker, err := lock.NewPostgresSessionLocker()
	if err != nil {
		return err
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, fsys,
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	results, err := provider.Up(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if logger != nil {
		for _, r := range results {
			logger.Info("migration applied", "source", r.Source.Path, "duration", r.Duration)
		}
	}
	return nil
}

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

// Config names a service's database, the migrations it owns and the bounds of its
// pool.
type Config struct {
	URL        string
	Migrations fs.FS
	Bounds     Bounds
}

// Module provides the service's *pgxpool.Pool, with cfg.Bounds. On start it applies
// the pending migrations (waiting for a replica that holds the migration lock)
// over a connection of their own without the bounds, since a migration may rightly
// take longer than any request, before any component that uses the pool starts; on
// stop it closes the pool after them.
var Module = fx.Module("postgres",
	fx.Provide(func(lc fx.Lifecycle, cfg Config, logger *slog.Logger) (*pgxpool.Pool, error) {
		pool, err := OpenBounded(context.Background(), cfg.URL, cfg.Bounds)
		if err != nil {
			return nil, fmt.Errorf("DATABASE_URL: %w", err)
		}
		lc.Append(fx.Hook{
			OnStart: func(ctx context.Context) error { return MigrateURL(ctx, cfg.URL, cfg.Migrations, logger) },
			OnStop:  func(context.Context) error { pool.Close(); return nil },
		})
		return pool, nil
	}),
)

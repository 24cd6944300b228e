// Package database opens a service's database from DATABASE_URL, in either
// dialect: sqlite:PATH selects SQLite (infra/sqlite), anything else is a
// PostgreSQL URL (infra/postgres). It is the one package that knows both
// dialects' concrete types: Open chooses the dialect once, and Pick is the one
// place that looks at an opened DB's type, to build the stores of its dialect
// (each slice declares them per dialect in a Dialects value). Everything above
// the stores sees only sqldb.DB.
package database

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"

	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/migrations"
)

// DB is an open database: the port the use cases see, and its Close.
type DB interface {
	sqldb.DB
	Close() error
}

// Dialects is one value per dialect: what a slice builds for each (its
// stores, bound to the dialect's executor).
type Dialects[T any] struct {
	Postgres func(*postgres.DB) T
	SQLite   func(*sqlite.DB) T
}

// Pick returns d's value for db's dialect, built from db. db must be a DB
// that Open (or infra/postgres, infra/sqlite) opened: anything else is a
// wiring defect, and Pick panics naming its type. This is the one type switch
// on a database in the module.
func Pick[T any](db sqldb.DB, d Dialects[T]) T {
	switch db := db.(type) {
	case *postgres.DB:
		return d.Postgres(db)
	case *sqlite.DB:
		return d.SQLite(db)
	default:
		panic(fmt.Sprintf("database: %T is not an opened database of either dialect (pass the DB Open returned)", db))
	}
}

// Open opens url's database with b. It does not wait for a PostgreSQL server
// (a service may start while it comes up; /readyz tells when it answers); a
// SQLite file and its folder are created when missing.
func Open(ctx context.Context, url string, b sqldb.Bounds, opts ...postgres.Option) (DB, error) {
	if sqldb.DialectOf(url) == sqldb.SQLite {
		return sqlite.Open(ctx, url, b)
	}
	pool, err := postgres.OpenBounded(ctx, url, b, opts...)
	if err != nil {
		return nil, err
	}
	return postgres.NewDB(pool), nil
}

// OpenExisting is Open for a command that must not create a database: a
// missing SQLite file is an error naming its absolute path (a PostgreSQL
// database is never created anyway).
func OpenExisting(ctx context.Context, url string, b sqldb.Bounds) (DB, error) {
	if sqldb.DialectOf(url) == sqldb.SQLite {
		return sqlite.OpenExisting(ctx, url, b)
	}
	db, err := Open(ctx, url, b)
	if err != nil {
		return nil, err
	}
	if err := reach(ctx, db); err != nil {
		db.Close()
		return nil, err
	}
	return db, nil
}

// reach pings a PostgreSQL database, failing with one line that names where
// it is (host, port, database; never the password).
func reach(ctx context.Context, db DB) error {
	return Pick(db, Dialects[error]{
		Postgres: func(d *postgres.DB) error {
			if err := d.Pool.Ping(ctx); err != nil {
				return fmt.Errorf("cannot reach the PostgreSQL database %s: %w", where(d), err)
			}
			return nil
		},
		SQLite: func(*sqlite.DB) error { return nil },
	})
}

// where is the host, port and database of a PostgreSQL pool.
func where(d *postgres.DB) string {
	c := d.Pool.Config().ConnConfig
	return fmt.Sprintf("%q at %s:%d", c.Database, c.Host, c.Port)
}

// Describe is the log attributes naming db: the SQLite file's absolute path
// and whether this process created it, or PostgreSQL's host, port and
// database (never the password).
func Describe(db DB) []any {
	return Pick(db, Dialects[[]any]{
		Postgres: func(d *postgres.DB) []any {
			c := d.Pool.Config().ConnConfig
			return []any{"dialect", "postgres", "host", c.Host, "port", c.Port, "database", c.Database}
		},
		SQLite: func(d *sqlite.DB) []any {
			abs, err := filepath.Abs(d.Path)
			if err != nil {
				abs = d.Path
			}
			return []any{"dialect", "sqlite", "path", abs, "created", d.Created}
		},
	})
}

// Name is db on one line for the person at a terminal, from Describe's
// attributes, so the operator commands' line and the "database opened" log
// name a database alike: the dialect, then the other attributes as key=value,
// a value quoted as Go quotes it when it is empty or holds a space, a quote,
// an = or a character that does not print ("sqlite path=/srv/data/labeling.db",
// "postgres host=db port=5432 database=app"), never the password. It leaves
// out whether this process created the SQLite file: the commands that print
// it open an existing database only.
func Name(db DB) string {
	attrs := Describe(db)
	var b strings.Builder
	fmt.Fprint(&b, attrs[1]) // attrs[0] is "dialect"
	for i := 2; i+1 < len(attrs); i += 2 {
		if attrs[i] == "created" {
			continue
		}
		v := fmt.Sprint(attrs[i+1])
		if v == "" || strings.IndexFunc(v, func(r rune) bool { return r == ' ' || r == '"' || r == '=' || !unicode.IsPrint(r) }) >= 0 {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, " %s=%s", attrs[i], v)
	}
	return b.String()
}

// Migrate applies the pending migrations of m in db's dialect, safe for
// replicas that start together (a PostgreSQL session lock; a file lock on
// SQLite).
func Migrate(ctx context.Context, db DB, m migrations.Set, logger *slog.Logger) error {
	return Pick(db, Dialects[error]{
		Postgres: func(d *postgres.DB) error {
			if err := reach(ctx, d); err != nil {
				return fmt.Errorf("DATABASE_URL: %w", err)
			}
			return postgres.Migrate(ctx, d.Pool, m, logger)
		},
		SQLite: func(d *sqlite.DB) error { return sqlite.Migrate(ctx, d, m.SQLite, m.Table, logger) },
	})
}

// MigrateURL opens url without bounds (a migration may rightly take longer than
// any request), migrates it and closes it.
// It logs the database it opened (Describe).
func MigrateURL(ctx context.Context, url string, m migrations.Set, logger *slog.Logger) error {
	return migrateURL(ctx, url, m, logger, true)
}

func migrateURL(ctx context.Context, url string, m migrations.Set, logger *slog.Logger, logOpen bool) error {
	db, err := Open(ctx, url, sqldb.Bounds{})
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer db.Close()
	if logOpen && logger != nil {
		logger.Info("database opened", Describe(db)...)
	}
	return Migrate(ctx, db, m, logger)
}

// Config names a service's database, its migrations and its bounds.
type Config struct {
	URL        string
	Migrations migrations.Set
	Bounds     sqldb.Bounds
}

// StopShare is the pool's close's share of the stop budget (contract section
// 5). A pool whose connections a partition holds may not finish closing
// (each one waits to say goodbye); it is left to the process exit, and the
// server ends those sessions (idle_in_transaction_session_timeout,
// infra/postgres), so nothing is lost by not waiting.
var StopShare = stopbudget.Share{Name: "database", Timeout: time.Second}

// Module provides the service's sqldb.DB (with cfg.Bounds; its PostgreSQL
// statements traced when the app's *telemetry.Provider is on). On start it
// applies the pending migrations over a connection of their own without the
// bounds, before any component that uses the database starts; on stop it
// closes the database after them, within StopShare.
var Module = stopbudget.Module(StopShare, fx.Module("database",
	fx.Provide(func(lc fx.Lifecycle, cfg Config, logger *slog.Logger, tp *telemetry.Provider) (sqldb.DB, error) {
		db, err := Open(context.Background(), cfg.URL, cfg.Bounds, postgres.Traced(tp.On()))
		if err != nil {
			return nil, fmt.Errorf("DATABASE_URL: %w", err)
		}
		// Once, here: this Open is the one that creates a missing SQLite file.
		logger.Info("database opened", Describe(db)...)
		lc.Append(fx.Hook{
			OnStart: func(ctx context.Context) error { return migrateURL(ctx, cfg.URL, cfg.Migrations, logger, false) },
			OnStop:  func(ctx context.Context) error { closeWithin(ctx, db, logger); return nil },
		})
		return db, nil
	}),
))

// closeWithin closes db, waiting no longer than ctx: a PostgreSQL pool's close
// waits for each connection's goodbye, which an unreachable server never
// answers; the server ends a session whose client is gone.
func closeWithin(ctx context.Context, db DB, logger *slog.Logger) {
	done := make(chan struct{})
	go func() {
		if err := db.Close(); err != nil {
			logger.Warn("database close failed", "err", err)
		}
		close(done)
	}()
	start := time.Now()
	select {
	case <-done:
		logger.Info("database pool closed", "duration_ms", time.Since(start).Milliseconds())
	case <-ctx.Done():
		logger.Warn("database pool did not close within its share of the stop budget; its connections are left to the exit")
	}
}

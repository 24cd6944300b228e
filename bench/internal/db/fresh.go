// Package db makes the fresh databases of one measurement in the sitting's
// dialect (PostgreSQL, or SQLite with -sqlite), so that each measurement is
// written once for both: the project's labeling and billing databases, their
// latency stamps, their backlogs and seeds, and the Querier the probes and
// clocks read them through.
package db

import (
	"context"
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/bench/internal/sitting"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// Labeling is a fresh labeling database.
type Labeling struct {
	URL   string        // its DATABASE_URL
	Port  sqldb.DB      // what labeling's use cases and the relay's store run on
	Store outbox.Store  // the relay's store on it
	Q     Querier       // what the probes read it through
	Pool  *pgxpool.Pool // PostgreSQL only: the producer's SQL runs on it
	Write *sql.DB       // SQLite only: the writer connection of this process
	// Commit commits n pending outbox rows in one transaction (ANALYZE in it
	// when analyzed; on PostgreSQL with the relays' wake-up) and returns the
	// drain's start.
	Commit func(ctx context.Context, n int, analyzed bool) (time.Time, error)
	Close  func() // closes the connections and drops the database
}

// NewLabeling makes a labeling database, with the latency stamp on its outbox
// when stamp is set.
func NewLabeling(ctx context.Context, s *sitting.Sitting, stamp bool) (*Labeling, error) {
	if s.Opt.SQLite {
		setup := StampIf(stamp, true, "outbox_events")
		path, d, q, closeFile, err := LiteCreate(ctx, s.Files, sitting.SchemaLabeling, setup, openLite(ctx, s))
		if err != nil {
			return nil, err
		}
		return &Labeling{
			URL: "sqlite:" + path, Port: d, Store: outbox.NewSQLiteStore(d), Q: q, Write: d.Write,
			Commit: func(ctx context.Context, n int, analyzed bool) (time.Time, error) {
				return LiteCommit(ctx, d.Write, AnalyzedTable(analyzed, "outbox_events"), func(tx *sql.Tx) error { return liteFillOutbox(ctx, tx, n) })
			},
			Close: closeFile,
		}, nil
	}
	setup := StampIf(stamp, false, "outbox_events")
	url, pool, closeDB, err := PGCreate(ctx, s, sitting.SchemaLabeling, setup)
	if err != nil {
		return nil, err
	}
	return &Labeling{
		URL: url, Port: postgres.NewDB(pool), Store: outbox.NewPostgresStore(pool), Q: PG{pool}, Pool: pool,
		Commit: func(ctx context.Context, n int, analyzed bool) (time.Time, error) {
			return CommitBacklog(ctx, pool, AnalyzedTable(analyzed, "outbox_events"), func(tx pgx.Tx) error { return FillOutbox(ctx, tx, n) })
		},
		Close: closeDB,
	}, nil
}

// PGCreate makes a fresh PostgreSQL database with schema sc, runs setup on it
// ("": nothing) and opens the services' pool on it; closeDB closes the pool and
// drops the database.
func PGCreate(ctx context.Context, s *sitting.Sitting, sc sitting.Schema, setup string) (url string, pool *pgxpool.Pool, closeDB func(), err error) {
	if url, err = s.Env.Create(ctx, sc); err != nil {
		return "", nil, nil, err
	}
	drop := func() { s.Env.Drop(context.WithoutCancel(ctx), url) }
	if setup != "" {
		if err := installStamp(ctx, url, setup); err != nil {
			drop()
			return "", nil, nil, err
		}
	}
	if pool, err = sitting.Open(ctx, url); err != nil {
		drop()
		return "", nil, nil, err
	}
	return url, pool, func() { pool.Close(); drop() }, nil
}

// openLite opens a SQLite file as a service's process does.
func openLite(ctx context.Context, s *sitting.Sitting) func(path string) (*sqlite.DB, error) {
	return func(path string) (*sqlite.DB, error) { return sqlite.Open(ctx, "sqlite:"+path, s.LiteBounds) }
}

// LiteCreate makes a fresh SQLite file with schema s (setup run on it), opens
// it with openFile (as the process that owns it would) and the probes'
// connections beside; closeFile closes both and removes the file.
func LiteCreate[T interface{ Close() error }](ctx context.Context, f *sitting.Files, s sitting.Schema, setup string, openFile func(string) (T, error)) (path string, d T, q Lite, closeFile func(), err error) {
	if path, err = f.Create(ctx, s, setup); err != nil {
		return "", d, q, nil, err
	}
	if d, err = openFile(path); err != nil {
		f.Remove(path)
		return "", d, q, nil, err
	}
	if q, err = OpenProbe(path); err != nil {
		d.Close()
		f.Remove(path)
		return "", d, q, nil, err
	}
	return path, d, q, func() { q.Close(); d.Close(); f.Remove(path) }, nil
}

// Seed inserts rules inactive rules (SeedRules).
func (l *Labeling) Seed(ctx context.Context, rules int) error {
	if l.Pool != nil {
		return SeedRules(ctx, l.Pool, rules/RulesPerClient)
	}
	return liteSeedRules(ctx, l.Write, rules)
}

// Billing is a fresh billing database whose receipts are stamped: for a
// drain's end, and with stamp for the latency figure (on SQLite both are the
// one trigger).
type Billing struct {
	URL   string        // its DATABASE_URL
	Port  sqldb.DB      // billing's Apply runs on it
	Q     Querier       // what the probes read it through
	Pool  *pgxpool.Pool // PostgreSQL only
	Close func()        // closes the connections and drops the database
}

// NewBilling makes a billing database, stamped for the latency figure when
// stamp is set.
func NewBilling(ctx context.Context, s *sitting.Sitting, stamp bool) (*Billing, error) {
	if s.Opt.SQLite {
		path, d, q, closeFile, err := LiteCreate(ctx, s.Files, sitting.SchemaBilling, StampSQL(true, "billing_receipts"), openLite(ctx, s))
		if err != nil {
			return nil, err
		}
		return &Billing{URL: "sqlite:" + path, Port: d, Q: q, Close: closeFile}, nil
	}
	// A drain's end is the receipts' bench_at column; the latency figure's
	// stamp the deferred trigger.
	setup := stampReceiptsColumn
	if stamp {
		setup = StampSQL(false, "billing_receipts")
	}
	url, pool, closeDB, err := PGCreate(ctx, s, sitting.SchemaBilling, setup)
	if err != nil {
		return nil, err
	}
	return &Billing{URL: url, Port: postgres.NewDB(pool), Q: PG{pool}, Pool: pool, Close: closeDB}, nil
}

package main

import (
	"context"
	"database/sql"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// The fresh databases of one measurement, in the run's dialect (PostgreSQL, or
// SQLite with -sqlite), so that each measurement is written once for both.

// probes are the statements that tell a drain is done and when it ended, in
// one dialect.
type probes struct {
	pending, pendingCount           string                  // outbox
	pendingFrom, riverPendingFrom   func(key string) string // nil: none (drainProbe.from)
	noopEnd                         string                  // the relay's last processed_at
	riverPending, riverPendingCount string
	riverEnd                        string // River's last finalized_at
	receiptsEnd, receiptsCount      string // billing's receipts
}

var pgProbes = probes{
	pending:           pendingProbe,
	pendingFrom:       pendingFrom,
	riverPendingFrom:  riverPendingFrom,
	pendingCount:      pendingCountSQL,
	noopEnd:           noopEndSQL,
	riverPending:      riverPendingProbe,
	riverPendingCount: riverPendingCountSQL,
	riverEnd:          riverEndSQL,
	receiptsEnd:       receiptsEndSQL,
	receiptsCount:     receiptsCountSQL,
}

func (b *bench) probes() probes {
	if b.opt.sqlite {
		return liteProbes
	}
	return pgProbes
}

// labelingDB is a fresh labeling database.
type labelingDB struct {
	url   string   // its DATABASE_URL
	port  sqldb.DB // what labeling's use cases and the relay's store run on
	store outbox.Store
	q     db
	pool  *pgxpool.Pool // PostgreSQL only: the producer's SQL runs on it
	write *sql.DB       // SQLite only: the writer connection of this process
	// commit commits n pending outbox rows in one transaction (ANALYZE in it
	// when analyzed; on PostgreSQL with the relays' wake-up) and returns the
	// drain's start.
	commit func(ctx context.Context, n int, analyzed bool) (time.Time, error)
	close  func()
}

// newLabeling makes a labeling database, with the latency stamp on its outbox
// when stamp is set.
func (b *bench) newLabeling(ctx context.Context, stamp bool) (*labelingDB, error) {
	if b.opt.sqlite {
		setup := stampIf(stamp, true, "outbox_events")
		path, d, q, closeFile, err := liteCreate(ctx, b.files, schemaLabeling, setup, b.openLite(ctx))
		if err != nil {
			return nil, err
		}
		return &labelingDB{
			url: "sqlite:" + path, port: d, store: outbox.NewSQLiteStore(d), q: q, write: d.Write,
			commit: func(ctx context.Context, n int, analyzed bool) (time.Time, error) {
				return liteCommit(ctx, d.Write, analyzedTable(analyzed, "outbox_events"), func(tx *sql.Tx) error { return liteFillOutbox(ctx, tx, n) })
			},
			close: closeFile,
		}, nil
	}
	setup := stampIf(stamp, false, "outbox_events")
	url, pool, closeDB, err := b.pgCreate(ctx, schemaLabeling, setup)
	if err != nil {
		return nil, err
	}
	return &labelingDB{
		url: url, port: postgres.NewDB(pool), store: outbox.NewPostgresStore(pool), q: pgDB{pool}, pool: pool,
		commit: func(ctx context.Context, n int, analyzed bool) (time.Time, error) {
			return commitBacklog(ctx, pool, analyzedTable(analyzed, "outbox_events"), func(tx pgx.Tx) error { return fillOutbox(ctx, tx, n) })
		},
		close: closeDB,
	}, nil
}

// pgCreate makes a fresh PostgreSQL database with schema s, runs setup on it
// ("": nothing) and opens the services' pool on it; closeDB closes the pool and
// drops the database.
func (b *bench) pgCreate(ctx context.Context, s schema, setup string) (url string, pool *pgxpool.Pool, closeDB func(), err error) {
	if url, err = b.env.create(ctx, s); err != nil {
		return "", nil, nil, err
	}
	drop := func() { b.env.drop(context.WithoutCancel(ctx), url) }
	if setup != "" {
		if err := installStamp(ctx, url, setup); err != nil {
			drop()
			return "", nil, nil, err
		}
	}
	if pool, err = open(ctx, url); err != nil {
		drop()
		return "", nil, nil, err
	}
	return url, pool, func() { pool.Close(); drop() }, nil
}

// openLite opens a SQLite file as a service's process does.
func (b *bench) openLite(ctx context.Context) func(path string) (*sqlite.DB, error) {
	return func(path string) (*sqlite.DB, error) { return sqlite.Open(ctx, "sqlite:"+path, b.liteBounds) }
}

// liteCreate makes a fresh SQLite file with schema s (setup run on it), opens
// it with openFile (as the process that owns it would) and the probes'
// connections beside; closeFile closes both and removes the file.
func liteCreate[T interface{ Close() error }](ctx context.Context, f *files, s schema, setup string, openFile func(string) (T, error)) (path string, d T, q liteDB, closeFile func(), err error) {
	if path, err = f.create(ctx, s, setup); err != nil {
		return "", d, q, nil, err
	}
	if d, err = openFile(path); err != nil {
		f.remove(path)
		return "", d, q, nil, err
	}
	if q, err = openProbe(path); err != nil {
		d.Close()
		f.remove(path)
		return "", d, q, nil, err
	}
	return path, d, q, func() { q.Close(); d.Close(); f.remove(path) }, nil
}

// seed inserts rules × rulesPerClient inactive rules (seedRules).
func (l *labelingDB) seed(ctx context.Context, rules int) error {
	if l.pool != nil {
		return seedRules(ctx, l.pool, rules/rulesPerClient)
	}
	return liteSeedRules(ctx, l.write, rules)
}

// billingDB is a fresh billing database whose receipts are stamped: for a
// drain's end, and with stamp for the latency figure (on SQLite both are the
// one trigger).
type billingDB struct {
	url   string
	port  sqldb.DB // billing's Apply runs on it
	q     db
	pool  *pgxpool.Pool // PostgreSQL only
	close func()
}

func (b *bench) newBilling(ctx context.Context, stamp bool) (*billingDB, error) {
	if b.opt.sqlite {
		path, d, q, closeFile, err := liteCreate(ctx, b.files, schemaBilling, stampSQL(true, "billing_receipts"), b.openLite(ctx))
		if err != nil {
			return nil, err
		}
		return &billingDB{url: "sqlite:" + path, port: d, q: q, close: closeFile}, nil
	}
	// A drain's end is the receipts' bench_at column; the latency figure's
	// stamp the deferred trigger.
	setup := stampReceiptsColumn
	if stamp {
		setup = stampSQL(false, "billing_receipts")
	}
	url, pool, closeDB, err := b.pgCreate(ctx, schemaBilling, setup)
	if err != nil {
		return nil, err
	}
	return &billingDB{url: url, port: postgres.NewDB(pool), q: pgDB{pool}, pool: pool, close: closeDB}, nil
}

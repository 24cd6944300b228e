package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river/riverdriver/riversqlite"

	"github.com/acme/outboxpair/infra/database"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/labeling"
	"github.com/acme/outboxpair/migrations"
)

// The SQLite sitting (-sqlite) runs the pair on SQLite files beside River on
// SQLite (riversqlite), in one run of interleaved rounds, timed as on
// PostgreSQL with what SQLite allows:
//
//   - Every file is opened as the services open theirs (infra/sqlite): WAL,
//     synchronous=FULL, the busy timeout, BEGIN IMMEDIATE on one writer
//     connection. River gets the very DSN of that writer on the one connection
//     its driver's documentation asks for (more connections fail with
//     SQLITE_BUSY): the same durability, the same lock behaviour.
//   - SQLite has no server clock and no deferred trigger. A drain's clock starts
//     at this process's clock read last before the backlog's commit, and every
//     stamp is this host's clock too (the relay's processed_at, River's
//     finalized_at, a trigger's unixepoch('subsec')), in milliseconds: SQLite's
//     'now' has no finer grain. A trigger fires at its INSERT, inside the
//     committing transaction, so a stamp is early by the rest of that
//     transaction and its fsync, at both ends of a latency and for every system
//     alike.
//   - SQLite has no LISTEN/NOTIFY: a relay is woken by a Nudge in the appending
//     process (contract section 9), River by its driver's notification table,
//     which its listener polls every 50ms. So the in-process pair is nudged after
//     the backlog's commit (as a use case nudges after its own), and the pair
//     over HTTP gets one activation POSTed right after it: an append in
//     labeling's own process is the only wake-up the binaries have; that event
//     is one of the drain's n.
//   - The probes read through read-only connections of their own, so they take
//     nothing from River's one connection or the pair's pools.

// liteProbes are the probes and end stamps in SQLite's form (probes in drain.go).
var liteProbes = probes{
	pending:           `SELECT 1 FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL ORDER BY created_at LIMIT 1`,
	pendingCount:      pendingCountSQL,
	noopEnd:           `SELECT max(processed_at) FROM outbox_events`,
	riverPending:      `SELECT 1 FROM river_job WHERE state IN ('available', 'running', 'retryable', 'scheduled', 'pending') LIMIT 1`,
	riverPendingCount: riverPendingCountSQL,
	// River stores a time as 'YYYY-MM-DD HH:MM:SS.mmm' UTC, which sorts as it
	// compares.
	riverEnd:      `SELECT CAST(round(unixepoch(max(finalized_at), 'subsec') * 1000) AS INTEGER) FROM river_job`,
	receiptsEnd:   `SELECT max(at) FROM bench_stamp`,
	receiptsCount: receiptsCountSQL,
}

// liteDB is db on read-only connections to a SQLite file. Its clock is this
// host's, which every stamp in the file was taken with.
type liteDB struct{ *sql.DB }

func (l liteDB) one(ctx context.Context, query string, dest ...any) error {
	return noRowAs(l.QueryRowContext(ctx, query).Scan(dest...), sql.ErrNoRows)
}

func (l liteDB) at(ctx context.Context, query string) (*time.Time, error) {
	var ms sql.NullInt64
	if err := l.QueryRowContext(ctx, query).Scan(&ms); err != nil || !ms.Valid {
		return nil, err
	}
	at := time.UnixMilli(ms.Int64)
	return &at, nil
}

func (liteDB) clock(context.Context) (time.Time, error) { return time.Now(), nil }

func (l liteDB) stamps(ctx context.Context) (map[uuid.UUID]time.Time, error) {
	rows, err := l.QueryContext(ctx, `SELECT id, at FROM bench_stamp`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	return collectStamps(rows, func(scan func(...any) error) (uuid.UUID, time.Time, error) {
		var (
			id string
			ms int64
		)
		if err := scan(&id, &ms); err != nil {
			return uuid.Nil, time.Time{}, err
		}
		u, err := uuid.Parse(id)
		return u, time.UnixMilli(ms), err
	})
}

// openProbe opens read-only connections to path for the probes.
func openProbe(path string) (liteDB, error) {
	d, err := sql.Open("sqlite", sqlite.DSN(path, 0, false, true))
	if err != nil {
		return liteDB{}, err
	}
	d.SetMaxOpenConns(2)
	return liteDB{d}, nil
}

// liteBounds are the database bounds the binaries run with (DB_STATEMENT_TIMEOUT,
// DB_LOCK_TIMEOUT from this environment), for every file this program opens.
func liteBounds(lookup envvar.Lookup) (sqldb.Bounds, error) {
	r := envvar.New(lookup)
	b := r.Bounds()
	return b, r.Err()
}

// files makes the run's SQLite files in dir: each a copy of a template
// migrated once per run, as env clones PostgreSQL templates.
type files struct {
	dir       string
	bounds    sqldb.Bounds
	mu        sync.Mutex
	n         int
	templates map[schema]string
}

func newFiles(dir string, b sqldb.Bounds) *files {
	return &files{dir: dir, bounds: b, templates: map[schema]string{}}
}

// create returns the path of a fresh file with schema s, and sql run on it
// (the stamps) before anything else opens it.
func (f *files) create(ctx context.Context, s schema, setup string) (string, error) {
	tmpl, err := f.template(ctx, s)
	if err != nil {
		return "", err
	}
	f.mu.Lock()
	f.n++
	path := filepath.Join(f.dir, fmt.Sprintf("%d_%s.db", f.n, s))
	f.mu.Unlock()
	if err := copyFile(tmpl, path); err != nil {
		return "", err
	}
	if setup != "" {
		w, err := sql.Open("sqlite", sqlite.DSN(path, f.bounds.LockTimeout, true, false))
		if err != nil {
			return "", err
		}
		defer w.Close()
		if _, err := w.ExecContext(ctx, setup); err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
	}
	return path, nil
}

// remove deletes a file and its WAL companions once a measurement is done.
func (f *files) remove(path string) {
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-migrate.lock"} {
		_ = os.Remove(p)
	}
}

func (f *files) template(ctx context.Context, s schema) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.templates[s]; ok {
		return p, nil
	}
	p := filepath.Join(f.dir, "tmpl_"+string(s)+".db")
	var err error
	switch s {
	case schemaLabeling:
		err = database.MigrateURL(ctx, "sqlite:"+p, migrations.Labeling, nil)
	case schemaBilling:
		err = database.MigrateURL(ctx, "sqlite:"+p, migrations.Billing, nil)
	case schemaRiver:
		err = migrateRiverFile(ctx, p, f.bounds)
	default:
		err = fmt.Errorf("no SQLite template for %s", s)
	}
	if err != nil {
		return "", fmt.Errorf("migrate template %s: %w", p, err)
	}
	// A template is copied as one file: its last connection has closed, so WAL
	// has been checkpointed into it.
	if st, err := os.Stat(p + "-wal"); err == nil && st.Size() > 0 {
		return "", fmt.Errorf("template %s: its WAL was not checkpointed", p)
	}
	f.templates[s] = p
	return p, nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// openRiverDB opens path for River: the pair's writer DSN (WAL,
// synchronous=FULL, the busy timeout, BEGIN IMMEDIATE) on one connection, as
// riversqlite's documentation asks.
func openRiverDB(path string, b sqldb.Bounds) (*sql.DB, error) {
	d, err := sql.Open("sqlite", sqlite.DSN(path, b.LockTimeout, true, false))
	if err != nil {
		return nil, err
	}
	d.SetMaxOpenConns(1)
	d.SetMaxIdleConns(1)
	d.SetConnMaxLifetime(0)
	d.SetConnMaxIdleTime(0)
	return d, nil
}

func migrateRiverFile(ctx context.Context, path string, b sqldb.Bounds) error {
	d, err := openRiverDB(path, b)
	if err != nil {
		return err
	}
	defer d.Close()
	return migrateRiverWith(ctx, riversqlite.New(d))
}

// liteCommit runs fill in one write transaction on w (BEGIN IMMEDIATE), then
// ANALYZE in it when analyzeTable is set, reads this host's clock and commits.
// The clock reading is the drain's start, as commitBacklog's on PostgreSQL.
func liteCommit(ctx context.Context, w *sql.DB, analyzeTable string, fill func(*sql.Tx) error) (time.Time, error) {
	tx, err := w.BeginTx(ctx, nil)
	if err != nil {
		return time.Time{}, fmt.Errorf("commit backlog: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // after a commit it does nothing
	if err := fill(tx); err != nil {
		return time.Time{}, fmt.Errorf("commit backlog: %w", err)
	}
	if analyzeTable != "" {
		if _, err := tx.ExecContext(ctx, "ANALYZE "+analyzeTable); err != nil {
			return time.Time{}, err
		}
	}
	start := time.Now()
	if err := tx.Commit(); err != nil {
		return time.Time{}, fmt.Errorf("commit backlog: %w", err)
	}
	return start, nil
}

// liteFillOutbox inserts n pending RuleActivated rows as Append writes them on
// SQLite, created from createdAhead on (see fillOutbox).
func liteFillOutbox(ctx context.Context, tx *sql.Tx, n int) error {
	stmt, err := tx.PrepareContext(ctx, `
		INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
		VALUES (?1, ?2, ?3, ?4, ?5, 0)`)
	if err != nil {
		return err
	}
	defer stmt.Close()
	now := time.Now()
	base := now.Add(createdAhead).UnixMilli()
	for i := range n {
		payload, err := json.Marshal(labeling.RuleActivated{OrgID: orgID(i % orgs), RuleID: uuid.New()})
		if err != nil {
			return err
		}
		if _, err := stmt.ExecContext(ctx, uuid.NewString(), labeling.TagRuleActivated, string(payload), base+int64(i), now.UnixMilli()); err != nil {
			return fmt.Errorf("fill outbox: %w", err)
		}
	}
	return nil
}

// liteSeedRules inserts n inactive rules, rule r in org r % orgs, as seedRules.
func liteSeedRules(ctx context.Context, w *sql.DB, n int) error {
	_, err := liteCommit(ctx, w, "", func(tx *sql.Tx) error {
		now := time.Now().UnixMilli()
		for r := range n {
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO labeling_rules (org_id, id, name, pattern, label, active, created_at, updated_at)
				VALUES (?1, ?2, ?3, '(?i)invoice', 'finance', 0, ?4, ?4)`,
				orgID(r%orgs).String(), ruleID(r).String(), fmt.Sprintf("bench %d", r), now); err != nil {
				return err
			}
		}
		return nil
	})
	return err
}

// sqliteVersion names the SQLite library of this build: its version and the
// modernc.org/sqlite module that carries it.
func sqliteVersion(ctx context.Context, dir string) string {
	d, err := sql.Open("sqlite", sqlite.DSN(filepath.Join(dir, "version.db"), 0, false, false))
	if err != nil {
		return "(unknown)"
	}
	defer d.Close()
	v := "(unknown)"
	_ = d.QueryRowContext(ctx, `SELECT sqlite_version()`).Scan(&v)
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, m := range bi.Deps {
			if m.Path == "modernc.org/sqlite" {
				v += " (modernc.org/sqlite " + m.Version + ")"
			}
		}
	}
	return v
}

// liteMachine describes where the SQLite figures were taken.
func liteMachine(ctx context.Context, dir string, b sqldb.Bounds) machine {
	m := hostMachine()
	m.DBName, m.DBVersion = "SQLite", sqliteVersion(ctx, dir)
	m.Settings = [][2]string{
		{"journal_mode", "WAL"}, {"synchronous", "FULL"}, {"busy_timeout", b.LockTimeout.String()},
		{"statement bound", b.StatementTimeout.String()}, {"files in", dir},
	}
	return m
}

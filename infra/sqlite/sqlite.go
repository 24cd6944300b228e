// Package sqlite opens a service's SQLite database (modernc.org/sqlite through
// database/sql: no cgo) and applies its migrations. It is the SQLite side of
// infra/sqldb: the SQLite stores of each slice run their statements through
// the Tx (the executor) its transactions hand them.
//
// Every connection is opened with its pragmas in the DSN, so a connection the
// pool replaces has them too: WAL (readers never wait for the writer),
// synchronous=FULL (a commit is on disk when it returns: a 2xx never names a
// commit a power cut can lose), foreign keys, and the busy timeout
// (DB_LOCK_TIMEOUT) for waiting on a writer of another process. A process has
// one writer connection, and every write transaction is BEGIN IMMEDIATE: it
// takes the write lock at its start, where a wait is bounded by the busy
// timeout, instead of upgrading a read lock later, which fails at once under a
// concurrent writer. Reads run on separate connections, in WAL's snapshots.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	sqlite "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/acme/outboxpair/infra/sqldb"
)

// readConns is the most read connections a process keeps open.
const readConns = 4

// walLimit is the journal_size_limit (bytes): the most a checkpointed WAL keeps.
const walLimit = 64 << 20

// checkpointEvery is how often the checkpoint loop tries to empty the WAL.
const checkpointEvery = 30 * time.Second

// defaultBusy is the busy timeout when sqldb.Bounds.LockTimeout is 0.
const defaultBusy = 5 * time.Second

// DB is a SQLite database opened for one process: one writer connection and a
// few readers.
type DB struct {
	Path string
	// Created is true when Open created the file (for the start-up's log line).
	Created bool
	Write   *sql.DB // one connection; every transaction on it is BEGIN IMMEDIATE
	Read    *sql.DB // read-only connections
	bounds  sqldb.Bounds
	busy    time.Duration
	// stop ends the checkpoint loop; done is closed when it has returned.
	stop context.CancelFunc
	done chan struct{}
}

var _ sqldb.Transactor[Tx] = (*DB)(nil)

// Tx is the executor of one SQLite transaction: the statements of the stores
// run through it, and only through it, so they run in that transaction. Each
// statement runs on its caller's context ended also at the transaction's
// deadline (DB_STATEMENT_TIMEOUT) or end: a statement is interrupted at the
// bound without its caller doing anything. database/sql's own cancellation of
// the transaction would wait for the running statement, so the statement's own
// context must end. It cannot commit or roll back: DB.InTx does.
type Tx struct {
	tx *sql.Tx
	// bound ends when the statement timeout passes or the transaction ends.
	bound context.Context
}

// Exec runs a statement in the transaction, interrupted at its bound.
func (t Tx) Exec(ctx context.Context, query string, args ...any) (sql.Result, error) {
	return t.tx.ExecContext(t.context(ctx), query, args...)
}

// Query runs a query in the transaction, interrupted at its bound (the rows
// too: reading them past the bound fails).
func (t Tx) Query(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	return t.tx.QueryContext(t.context(ctx), query, args...)
}

// QueryRow runs a query of at most one row in the transaction, interrupted at
// its bound.
func (t Tx) QueryRow(ctx context.Context, query string, args ...any) *sql.Row {
	return t.tx.QueryRowContext(t.context(ctx), query, args...)
}

// Prepare prepares a statement of the transaction (for a batch: one parse,
// many runs); its runs are bounded as Exec is. It is closed with the
// transaction at the latest.
func (t Tx) Prepare(ctx context.Context, query string) (Stmt, error) {
	s, err := t.tx.PrepareContext(t.context(ctx), query)
	return Stmt{stmt: s, tx: t}, err
}

// Stmt is a prepared statement of a Tx.
type Stmt struct {
	stmt *sql.Stmt
	tx   Tx
}

// Exec runs the statement with args, interrupted at its transaction's bound.
func (s Stmt) Exec(ctx context.Context, args ...any) (sql.Result, error) {
	return s.stmt.ExecContext(s.tx.context(ctx), args...)
}

// Close releases the statement.
func (s Stmt) Close() error { return s.stmt.Close() }

// context is ctx, ended also when t's statement timeout passes (or t ends).
func (t Tx) context(ctx context.Context) context.Context {
	if t.bound == nil {
		return ctx
	}
	var cancel context.CancelFunc
	if deadline, ok := t.bound.Deadline(); ok {
		// Its own deadline, so that a statement cut off by the timeout fails
		// with context.DeadlineExceeded (unavailable), not as cancelled.
		ctx, cancel = context.WithDeadline(ctx, deadline)
	} else {
		ctx, cancel = context.WithCancel(ctx)
	}
	context.AfterFunc(t.bound, func() {
		// At the transaction's end, at the latest when InTx returns. When the
		// bound's deadline passed, ctx's own passes at the same instant: left
		// to it, the statement fails with DeadlineExceeded.
		if !errors.Is(t.bound.Err(), context.DeadlineExceeded) {
			cancel()
		}
	})
	return ctx
}

// DSN is the modernc DSN of path with the pragmas every connection needs.
// immediate makes every transaction BEGIN IMMEDIATE; readOnly opens a
// connection that refuses writes.
func DSN(path string, busy time.Duration, immediate, readOnly bool) string {
	if busy <= 0 {
		busy = defaultBusy
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout("+strconv.FormatInt(busy.Milliseconds(), 10)+")")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(FULL)")
	q.Add("_pragma", "foreign_keys(1)")
	// A WAL grown past this under a long reader is truncated back to it at the
	// next checkpoint that resets it, instead of keeping its peak size.
	q.Add("_pragma", "journal_size_limit("+strconv.Itoa(walLimit)+")")
	if readOnly {
		q.Add("_pragma", "query_only(1)")
	}
	if immediate {
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// Open opens (and creates, with its folder, when missing) the SQLite file of a
// sqlite:PATH URL. It does not touch the schema: Migrate does. A folder it
// creates is 0700 and the file 0600, whatever the umask: SQLite gives the -wal
// and -shm files the database file's mode, and the migrate lock is 0600 too.
func Open(ctx context.Context, dbURL string, b sqldb.Bounds) (*DB, error) {
	return open(ctx, dbURL, b, checkpointEvery)
}

func open(ctx context.Context, dbURL string, b sqldb.Bounds, every time.Duration) (*DB, error) {
	path, err := sqldb.SQLitePath(dbURL)
	if err != nil {
		return nil, err
	}
	created, err := create(path)
	if err != nil {
		return nil, fmt.Errorf("create %s: %w", path, err)
	}
	w, err := sql.Open("sqlite", DSN(path, b.LockTimeout, true, false))
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	busy := b.LockTimeout
	if busy <= 0 {
		busy = defaultBusy
	}
	// The writer opens the file first: it creates it and switches it to WAL
	// before any reader opens it read-only.
	if err := firstOpen(ctx, w, busy); err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	r, err := sql.Open("sqlite", DSN(path, b.LockTimeout, false, true))
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	r.SetMaxOpenConns(readConns)
	r.SetMaxIdleConns(readConns)
	loop, stop := context.WithCancel(context.Background())
	db := &DB{Path: path, Created: created, Write: w, Read: r, bounds: b, busy: busy, stop: stop, done: make(chan struct{})}
	go db.checkpoints(loop, every)
	return db, nil
}

// firstOpen opens the writer's connection, whose pragmas switch a new file to
// WAL. That switch needs the file's exclusive lock, and SQLite answers
// SQLITE_BUSY at once, without its busy handler, when another process is
// switching the same new file (replicas starting together): so a busy open is
// tried again, for up to the busy timeout, as any other wait for a lock is.
func firstOpen(ctx context.Context, w *sql.DB, busy time.Duration) error {
	deadline := time.Now().Add(busy)
	pause := 5 * time.Millisecond
	for {
		err := w.PingContext(ctx)
		var e *sqlite.Error
		if err == nil || !errors.As(err, &e) || e.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().Add(pause).After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(pause):
		}
		pause = min(2*pause, 100*time.Millisecond)
	}
}

// checkpoints runs Checkpoint every interval until ctx ends. SQLite's own
// automatic checkpoint runs only at a commit, and only resets the WAL when a
// later write starts after it: a WAL grown under a long reader would keep its
// size (up to journal_size_limit) until more writes came. A failure is left to
// the next tick: a checkpoint is housekeeping, never needed for correctness.
func (db *DB) checkpoints(ctx context.Context, every time.Duration) {
	defer close(db.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = db.Checkpoint(ctx)
		}
	}
}

// Checkpoint copies the WAL's frames into the database file and, when no
// reader still uses the WAL, truncates it to zero bytes (wal_checkpoint
// TRUNCATE). It never waits: it runs with a busy timeout of 0 on the writer
// connection, so a reader still in the WAL (or another process's writer) makes
// it checkpoint what it can and return, instead of holding the one writer
// connection for up to DB_LOCK_TIMEOUT. The busy timeout is set back before the
// connection returns to the pool; when that fails the connection is discarded.
// It does nothing when the WAL is empty.
func (db *DB) Checkpoint(ctx context.Context) error {
	if fi, err := os.Stat(db.Path + "-wal"); err != nil || fi.Size() == 0 {
		return nil
	}
	conn, err := db.Write.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, `PRAGMA busy_timeout = 0`); err != nil {
		return errors.Join(err, db.restoreBusy(conn))
	}
	var busy, log, done int64
	err = conn.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &log, &done)
	return errors.Join(err, db.restoreBusy(conn))
}

// restoreBusy sets conn's busy timeout back to DB_LOCK_TIMEOUT, on a context of
// its own (the caller's may have ended), and discards conn when it cannot: a
// writer with a busy timeout of 0 would fail at once under another process's
// writer.
func (db *DB) restoreBusy(conn *sql.Conn) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := conn.ExecContext(ctx, `PRAGMA busy_timeout = `+strconv.FormatInt(db.busy.Milliseconds(), 10))
	if err != nil {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	return err
}

// create makes path's missing folders (0700) and the file itself (0600),
// reporting whether the file was created. The modes are set after the create,
// so the umask cannot widen or narrow them.
func create(path string) (bool, error) {
	var missing []string
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(dir); err == nil || !errors.Is(err, os.ErrNotExist) {
			break
		}
		missing = append(missing, dir)
		if dir == filepath.Dir(dir) {
			break
		}
	}
	for i := len(missing) - 1; i >= 0; i-- {
		if err := os.Mkdir(missing[i], 0o700); err != nil && !errors.Is(err, os.ErrExist) {
			return false, err
		}
		if err := os.Chmod(missing[i], 0o700); err != nil {
			return false, err
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	return true, f.Chmod(0o600)
}

// OpenExisting is Open for a command that must not create a database (the
// dead-letter listings, requeues and deletes): a missing file is an error
// naming its absolute path, and nothing is created.
func OpenExisting(ctx context.Context, dbURL string, b sqldb.Bounds) (*DB, error) {
	path, err := sqldb.SQLitePath(dbURL)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		abs, aerr := filepath.Abs(path)
		if aerr != nil {
			abs = path
		}
		return nil, fmt.Errorf("no SQLite database at %s (this command does not create one; run migrate or serve first)", abs)
	}
	return Open(ctx, dbURL, b)
}

// Close stops the checkpoint loop (interrupting a checkpoint under way) and
// closes both pools.
func (db *DB) Close() error {
	db.stop()
	<-db.done
	return errors.Join(db.Write.Close(), db.Read.Close())
}

// Dialect is sqldb.SQLite.
func (*DB) Dialect() sqldb.Dialect { return sqldb.SQLite }

// bound returns ctx bounded by the statement timeout.
func (db *DB) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if db.bounds.StatementTimeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, db.bounds.StatementTimeout)
}

// InTx runs fn in a transaction: on the writer (BEGIN IMMEDIATE) unless
// opts.ReadOnly, bounded by the statement timeout.
func (db *DB) InTx(ctx context.Context, opts sqldb.TxOptions, fn func(Tx) error) error {
	pool := db.Write
	if opts.ReadOnly {
		pool = db.Read
	}
	ctx, cancel := db.bound(ctx)
	defer cancel()
	tx, err := pool.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(Tx{tx: tx, bound: ctx}); err != nil {
		_ = tx.Rollback() // the error that matters is fn's
		return err
	}
	return tx.Commit()
}

// Ping succeeds when the file can be read and a write made durable: a read on
// a reader, and on the writer a committed write (PRAGMA user_version, rewritten
// with its own value: no table, no schema change), which appends one page to the
// WAL and fsyncs it under synchronous=FULL. BEGIN IMMEDIATE and a rollback
// would not touch the disk, so a full disk or a read-only file would pass. Its
// cost: one page frame and one fsync a probe.
func (db *DB) Ping(ctx context.Context) error {
	var n int
	if err := db.Read.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_schema`).Scan(&n); err != nil {
		return fmt.Errorf("read %s: %w", db.Path, err)
	}
	tx, err := db.Write.BeginTx(ctx, nil) // BEGIN IMMEDIATE: the write lock
	if err != nil {
		return fmt.Errorf("write %s: %w", db.Path, err)
	}
	var v int64
	if err := tx.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("write %s: %w", db.Path, err)
	}
	if _, err := tx.ExecContext(ctx, `PRAGMA user_version = `+strconv.FormatInt(v, 10)); err != nil {
		_ = tx.Rollback()
		return fmt.Errorf("write %s: %w", db.Path, err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("write %s: %w", db.Path, err)
	}
	return nil
}

// Unavailable reports whether err means the database could not serve now: busy
// past the busy timeout, locked, interrupted by the statement timeout, an I/O
// error, a full disk, a file it cannot open, or a closed pool.
func (*DB) Unavailable(err error) bool { return Unavailable(err) }

// Contention is always false: SQLite has one writer, and a write transaction
// holds the write lock from its start, so there is no serialization failure or
// deadlock to retry (a wait for another process is the busy timeout's).
func (*DB) Contention(error) bool { return false }

// Unavailable is DB.Unavailable.
func Unavailable(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, sql.ErrConnDone) ||
		strings.Contains(err.Error(), "sql: database is closed") { // database/sql's unexported errDBClosed
		return true
	}
	var e *sqlite.Error
	if errors.As(err, &e) {
		switch e.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_INTERRUPT,
			sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN,
			sqlite3.SQLITE_READONLY, sqlite3.SQLITE_PROTOCOL:
			return true
		}
		return false
	}
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, os.ErrPermission)
}

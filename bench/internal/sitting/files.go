package sitting

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"

	"github.com/riverqueue/river/riverdriver/riversqlite"

	"github.com/acme/outboxpair/bench/internal/report"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/migrations"
)

// Files makes the run's SQLite files (-sqlite) in one directory: each a copy
// of a template migrated once per run, as Env clones PostgreSQL templates. It
// is safe for concurrent use.
type Files struct {
	dir       string
	bounds    sqldb.Bounds
	mu        sync.Mutex
	n         int
	templates map[Schema]string
}

func newFiles(dir string, b sqldb.Bounds) *Files {
	return &Files{dir: dir, bounds: b, templates: map[Schema]string{}}
}

// Create returns the path of a fresh file with schema s, and setup run on it
// (the stamps; "": nothing) before anything else opens it.
func (f *Files) Create(ctx context.Context, s Schema, setup string) (string, error) {
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

// Remove deletes a file and its WAL companions once a measurement is done.
func (f *Files) Remove(path string) {
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-migrate.lock"} {
		_ = os.Remove(p)
	}
}

func (f *Files) template(ctx context.Context, s Schema) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.templates[s]; ok {
		return p, nil
	}
	p := filepath.Join(f.dir, "tmpl_"+string(s)+".db")
	var err error
	switch s {
	case SchemaLabeling:
		err = database.MigrateURL(ctx, "sqlite:"+p, migrations.Labeling, nil)
	case SchemaBilling:
		err = database.MigrateURL(ctx, "sqlite:"+p, migrations.Billing, nil)
	case SchemaRiver:
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

// OpenRiverDB opens path for River: the pair's writer DSN (WAL,
// synchronous=FULL, the busy timeout, BEGIN IMMEDIATE) on one connection, as
// riversqlite's documentation asks.
func OpenRiverDB(path string, b sqldb.Bounds) (*sql.DB, error) {
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
	d, err := OpenRiverDB(path, b)
	if err != nil {
		return err
	}
	defer d.Close()
	return migrateRiverWith(ctx, riversqlite.New(d))
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

// Machine describes where the SQLite figures were taken: the library's
// version, how every file is opened, and the directory of the files.
func (f *Files) Machine(ctx context.Context) report.Machine {
	m := report.Host()
	m.DBName, m.DBVersion = "SQLite", sqliteVersion(ctx, f.dir)
	m.Settings = [][2]string{
		{"journal_mode", "WAL"}, {"synchronous", "FULL"}, {"busy_timeout", f.bounds.LockTimeout.String()},
		{"statement bound", f.bounds.StatementTimeout.String()}, {"files in", f.dir},
	}
	return m
}

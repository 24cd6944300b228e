package sqlite_test

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/migrations"
)

func TestOpen(t *testing.T) {
	t.Parallel()

	t.Run("creates the file and its folders, in WAL with synchronous FULL and foreign keys, on every connection", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "a", "b", "labeling.db")
		db, err := sqlite.Open(t.Context(), "sqlite:"+path, sqldb.Bounds{LockTimeout: 1500 * time.Millisecond})
		require.NoError(t, err)
		defer db.Close()
		_, err = os.Stat(path)
		require.NoError(t, err)
		var mode string
		var sync, fk, busy int
		for _, c := range []struct {
			name string
			q    func(string, any) error
		}{
			{"writer", func(q string, v any) error { return db.Write.QueryRow(q).Scan(v) }},
			{"reader", func(q string, v any) error { return db.Read.QueryRow(q).Scan(v) }},
		} {
			require.NoError(t, c.q(`PRAGMA journal_mode`, &mode), c.name)
			require.Equal(t, "wal", mode, c.name)
			require.NoError(t, c.q(`PRAGMA synchronous`, &sync), c.name)
			require.Equal(t, 2, sync, c.name+": FULL")
			require.NoError(t, c.q(`PRAGMA foreign_keys`, &fk), c.name)
			require.Equal(t, 1, fk, c.name)
			require.NoError(t, c.q(`PRAGMA busy_timeout`, &busy), c.name)
			require.Equal(t, 1500, busy, c.name+": DB_LOCK_TIMEOUT")
			var limit int64
			require.NoError(t, c.q(`PRAGMA journal_size_limit`, &limit), c.name)
			require.Equal(t, int64(64<<20), limit, c.name+": the WAL is truncated to 64 MiB at a checkpoint")
		}
		require.NoError(t, db.Ping(t.Context()))
	})

	t.Run("a relative path is under the working directory", func(t *testing.T) {
		t.Parallel()
		p, err := sqldb.SQLitePath("sqlite:data/labeling.db")
		require.NoError(t, err)
		require.Equal(t, "data/labeling.db", p)
		_, err = sqldb.SQLitePath("sqlite:")
		require.Error(t, err)
	})

	t.Run("ping fails when the file cannot be written", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "gone")
		db, err := sqlite.Open(t.Context(), "sqlite:"+filepath.Join(dir, "x.db"), sqldb.Bounds{})
		require.NoError(t, err)
		defer db.Close()
		require.NoError(t, db.Ping(t.Context()))
		require.NoError(t, db.Write.Close()) // the writer is gone: nothing can be written
		err = db.Ping(t.Context())
		require.Error(t, err)
		require.True(t, db.Unavailable(err), "a database that cannot be written is unavailable: %v", err)
	})
}

func TestStatementTimeout(t *testing.T) {
	t.Parallel()
	db, err := sqlite.Open(t.Context(), "sqlite:"+filepath.Join(t.TempDir(), "t.db"), sqldb.Bounds{StatementTimeout: 100 * time.Millisecond})
	require.NoError(t, err)
	defer db.Close()
	start := time.Now()
	err = db.InTx(t.Context(), sqldb.TxOptions{}, func(tx sqlite.Tx) error {
		// A statement that runs far longer than the bound, on a context without
		// any deadline: the executor applies the transaction's. Without it the
		// statement would never end (database/sql's rollback at the deadline
		// waits for the running statement).
		_, err := tx.Exec(context.Background(),
			`WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c`)
		return err
	})
	require.Error(t, err)
	require.Less(t, time.Since(start), 5*time.Second, "DB_STATEMENT_TIMEOUT interrupts the statement")
	require.True(t, db.Unavailable(err), "an interrupted statement is unavailable (503): %v", err)
}

func TestMigrateReplicas(t *testing.T) {
	t.Parallel()
	// Replicas starting together on one file: each opens it on its own and
	// migrates; the file lock makes them run one after another, so every one
	// succeeds and each migration is applied once.
	path := filepath.Join(t.TempDir(), "shared.db")
	const replicas = 6
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	for i := range replicas {
		wg.Go(func() {
			// With DB_LOCK_TIMEOUT's default, as replicas run: with no busy timeout
			// at all, opening a new file beside five others fails at once (BUSY).
			db, err := sqlite.Open(context.Background(), "sqlite:"+path, sqldb.Bounds{LockTimeout: 2 * time.Second})
			if err != nil {
				errs[i] = err
				return
			}
			defer db.Close()
			errs[i] = sqlite.Migrate(context.Background(), db, migrations.Labeling.SQLite, migrations.Labeling.Table, nil)
		})
	}
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "replica %d", i)
	}
	db, err := sqlite.Open(t.Context(), "sqlite:"+path, sqldb.Bounds{})
	require.NoError(t, err)
	defer db.Close()
	var applied, distinct int
	require.NoError(t, db.Read.QueryRow(
		`SELECT count(*), count(DISTINCT version_id) FROM labeling_goose_db_version WHERE version_id > 0`).Scan(&applied, &distinct))
	files, err := fs.Glob(migrations.Labeling.SQLite, "*.sql")
	require.NoError(t, err)
	require.Equal(t, len(files), applied, "each migration recorded once")
	require.Equal(t, len(files), distinct)
}

// TestFileModes is not parallel: the umask is the process's, and it is set to
// 0 here so that only Open's own modes can make the files private.
func TestFileModes(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)

	t.Run("a created folder is 0700 and the database, -wal, -shm and migrate lock files 0600 under umask 0", func(t *testing.T) {
		root := t.TempDir()
		path := filepath.Join(root, "a", "b", "labeling.db")
		db, err := sqlite.Open(t.Context(), "sqlite:"+path, sqldb.Bounds{})
		require.NoError(t, err)
		defer db.Close()
		require.True(t, db.Created)
		require.NoError(t, sqlite.Migrate(t.Context(), db, migrations.Labeling.SQLite, migrations.Labeling.Table, nil))
		_, err = db.Write.ExecContext(t.Context(), `CREATE TABLE t (x INTEGER)`) // a write, so the -wal and -shm exist
		require.NoError(t, err)
		var n int
		require.NoError(t, db.Read.QueryRowContext(t.Context(), `SELECT count(*) FROM t`).Scan(&n))
		for _, dir := range []string{filepath.Join(root, "a"), filepath.Join(root, "a", "b")} {
			fi, err := os.Stat(dir)
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o700), fi.Mode().Perm(), dir)
		}
		for _, f := range []string{path, path + "-wal", path + "-shm", path + "-migrate.lock"} {
			fi, err := os.Stat(f)
			require.NoError(t, err)
			require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), f)
		}
	})

	t.Run("an existing file is opened as it is, not created", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "x.db")
		db, err := sqlite.Open(t.Context(), "sqlite:"+path, sqldb.Bounds{})
		require.NoError(t, err)
		require.True(t, db.Created)
		require.NoError(t, db.Close())
		db, err = sqlite.Open(t.Context(), "sqlite:"+path, sqldb.Bounds{})
		require.NoError(t, err)
		defer db.Close()
		require.False(t, db.Created)
	})
}

func TestPingNeedsADurableWrite(t *testing.T) {
	t.Parallel()
	t.Run("ping fails, as unavailable, when the WAL cannot be written (chattr +i: chmod does not stop root)", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "x.db")
		db, err := sqlite.Open(t.Context(), "sqlite:"+path, sqldb.Bounds{})
		require.NoError(t, err)
		defer db.Close()
		require.NoError(t, db.Ping(t.Context()))
		_, err = os.Stat(path + "-wal")
		require.NoError(t, err)
		out, err := exec.Command("chattr", "+i", path+"-wal").CombinedOutput()
		require.NoError(t, err, "chattr +i (needs root on ext4/xfs): %s", out)
		t.Cleanup(func() { _ = exec.Command("chattr", "-i", path+"-wal").Run() })

		err = db.Ping(t.Context())
		require.Error(t, err, "a write that cannot reach the disk is not ready")
		require.True(t, db.Unavailable(err), "%v", err)
	})
}

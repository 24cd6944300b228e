package sqlite_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/migrations"
)

// walSize is the size of path's WAL file (0 when it is missing).
func walSize(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path + "-wal")
	if os.IsNotExist(err) {
		return 0
	}
	require.NoError(t, err)
	return fi.Size()
}

// appendEvents commits n outbox appends of a realistic size (a 1 KiB payload),
// each in its own transaction, as the API's appends are.
func appendEvents(t *testing.T, db *sqlite.DB, from, n int) {
	t.Helper()
	payload := `{"rule":"` + strings.Repeat("x", 1024) + `"}`
	for i := from; i < from+n; i++ {
		_, err := db.Write.Exec(`INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at) VALUES (?, 'rule.created', ?, ?, ?)`,
			fmt.Sprintf("00000000-0000-4000-8000-%012d", i), payload, i, i)
		require.NoError(t, err)
	}
}

// holdReader begins a read transaction on a reader connection and reads, so its
// snapshot pins the WAL until the returned release is called.
func holdReader(t *testing.T, db *sqlite.DB) (release func()) {
	t.Helper()
	tx, err := db.Read.BeginTx(t.Context(), &sql.TxOptions{ReadOnly: true})
	require.NoError(t, err)
	var n int
	require.NoError(t, tx.QueryRow(`SELECT count(*) FROM outbox_events`).Scan(&n))
	return func() { require.NoError(t, tx.Rollback()) }
}

func TestWALShrinksOnceReadersLeave(t *testing.T) {
	t.Parallel()

	t.Run("a WAL grown under a long reader is truncated to zero after the reader leaves, with no further write", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "labeling.db")
		db, err := sqlite.OpenEvery(t.Context(), "sqlite:"+path, sqldb.Bounds{LockTimeout: 5 * time.Second}, 200*time.Millisecond)
		require.NoError(t, err)
		defer db.Close()
		require.NoError(t, sqlite.Migrate(t.Context(), db, migrations.Labeling.SQLite, migrations.Labeling.Table, nil))

		release := holdReader(t, db)
		appendEvents(t, db, 0, 600)
		grown := walSize(t, path)
		require.Greater(t, grown, int64(4<<20), "the reader pins the WAL: it grows past a few MiB")
		// Several ticks of the loop pass with the reader in: the WAL stays.
		time.Sleep(time.Second)
		require.Greater(t, walSize(t, path), int64(4<<20), "no checkpoint resets a WAL a reader still uses")
		release()

		require.Eventually(t, func() bool { return walSize(t, path) == 0 }, 30*time.Second, 50*time.Millisecond,
			"the WAL (%d bytes at its peak) is truncated once the reader left, without another write", grown)
		var n int
		require.NoError(t, db.Read.QueryRow(`SELECT count(*) FROM outbox_events`).Scan(&n))
		require.Equal(t, 600, n, "every committed row is in the database file")
	})

	t.Run("a checkpoint under a reader returns at once instead of holding the writer for the busy timeout", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "labeling.db")
		db, err := sqlite.OpenEvery(t.Context(), "sqlite:"+path, sqldb.Bounds{LockTimeout: 10 * time.Second}, time.Hour)
		require.NoError(t, err)
		defer db.Close()
		require.NoError(t, sqlite.Migrate(t.Context(), db, migrations.Labeling.SQLite, migrations.Labeling.Table, nil))

		release := holdReader(t, db)
		defer release()
		appendEvents(t, db, 0, 20)
		start := time.Now()
		require.NoError(t, db.Checkpoint(t.Context()))
		require.Less(t, time.Since(start), 3*time.Second, "TRUNCATE would wait on the busy handler (10 s) for the reader")
		require.Positive(t, walSize(t, path), "the reader still uses the WAL: it is not reset")
		var busy int
		require.NoError(t, db.Write.QueryRow(`PRAGMA busy_timeout`).Scan(&busy))
		require.Equal(t, 10000, busy, "the writer's busy timeout is DB_LOCK_TIMEOUT again")
		appendEvents(t, db, 20, 1) // the writer still writes
	})

	t.Run("close stops the loop", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "labeling.db")
		db, err := sqlite.OpenEvery(context.Background(), "sqlite:"+path, sqldb.Bounds{}, 10*time.Millisecond)
		require.NoError(t, err)
		time.Sleep(50 * time.Millisecond)
		done := make(chan error, 1)
		go func() { done <- db.Close() }()
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not return")
		}
	})
}

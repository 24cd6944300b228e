package drain

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/bench/internal/db"
	"github.com/acme/outboxpair/infra/sqlite"
)

// TestLiteStampsAndEnds runs the SQLite stamps, end stamps and the backlog's
// commit on a file: SQLite needs no server.
func TestLiteStampsAndEnds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "t.db")
	w, err := sql.Open("sqlite", sqlite.DSN(path, 0, true, false))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.ExecContext(ctx, `
		CREATE TABLE billing_receipts (event_id TEXT PRIMARY KEY, created_at INTEGER NOT NULL);
		CREATE TABLE river_job (id INTEGER PRIMARY KEY, finalized_at timestamp);`+
		db.StampSQL(true, "billing_receipts")); err != nil {
		t.Fatal(err)
	}
	q, err := db.OpenProbe(path)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()

	if at, err := q.At(ctx, liteProbes.ReceiptsEnd); err != nil || at != nil {
		t.Fatalf("end stamp of no receipt = %v, %v; want nil", at, err)
	}
	id := uuid.New()
	before := time.Now()
	start, err := db.LiteCommit(ctx, w, "", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO billing_receipts (event_id, created_at) VALUES (?1, 0)`, id.String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if start.Before(before) || start.After(after) {
		t.Errorf("LiteCommit's start %s is not within its call (%s to %s)", start, before, after)
	}
	stamps, err := q.Stamps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	at, ok := stamps[id]
	// The trigger's clock is this host's, in ms, taken inside the transaction.
	if !ok || at.Before(before.Truncate(time.Millisecond)) || at.After(start) {
		t.Fatalf("stamps = %v; want %s stamped between %s and %s", stamps, id, before, start)
	}
	end, err := StampOf(ctx, q, liteProbes.ReceiptsEnd)()
	if err != nil || !end.Equal(at) {
		t.Fatalf("receipts' end stamp = %s, %v; want %s", end, err, at)
	}
	var n int
	if err := q.One(ctx, liteProbes.ReceiptsCount, &n); err != nil || n != 1 {
		t.Fatalf("receipts counted %d, %v; want 1", n, err)
	}

	// River's times are text, UTC, to the ms.
	if _, err := w.ExecContext(ctx, `INSERT INTO river_job (finalized_at) VALUES ('2026-12-02 01:02:03.456'), ('2026-12-02 01:02:03.455'), (NULL)`); err != nil {
		t.Fatal(err)
	}
	got, err := StampOf(ctx, q, liteProbes.RiverEnd)()
	if want := time.Date(2026, 12, 2, 1, 2, 3, 456e6, time.UTC); err != nil || !got.Equal(want) {
		t.Fatalf("River's end stamp = %s, %v; want %s", got, err, want)
	}

	if pending, err := NoRow(ctx, q, `SELECT 1 FROM river_job WHERE id < 0`)(); err != nil || !pending {
		t.Fatalf("NoRow on no row = %t, %v; want true", pending, err)
	}
}

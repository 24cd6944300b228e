package main

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/sqlite"
)

func TestSQLiteFlags(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"-sqlite"}, {"-sqlite", "-only", "noop,consumer,http,latency"}} {
		if _, err := parseFlags(args); err != nil {
			t.Errorf("parseFlags(%q): %v", args, err)
		}
	}
	// What the error says, for each refused command line.
	refused := map[string][]string{
		`"claim" is not a workload of the SQLite sitting`: {"-sqlite", "-only", "noop,claim"},
		`"producer" is not a workload`:                    {"-sqlite", "-only", "producer"},
		"the SQLite sitting has no NATS rows":             {"-sqlite", "-nats", "start"},
	}
	for want, args := range refused {
		if _, err := parseFlags(args); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseFlags(%q) = %v, want an error containing %q", args, err, want)
		}
	}
}

func TestWantOnSQLite(t *testing.T) {
	t.Parallel()
	b := &bench{opt: options{sqlite: true}}
	for _, w := range workloadNames {
		if got, want := b.want(w), contains(sqliteWorkloads, w); got != want {
			t.Errorf("want(%q) with -sqlite and no -only = %t, want %t", w, got, want)
		}
	}
	b.opt.only = "latency"
	if b.want("noop") || !b.want("latency") {
		t.Errorf("-only latency: want(noop) = %t, want(latency) = %t", b.want("noop"), b.want("latency"))
	}
	if got := b.pgbenchClients(); len(got) != 0 {
		t.Errorf("pgbench references on SQLite: %v, want none", got)
	}
	if got := (&bench{}).pgbenchClients(); len(got) != len(pgbenchClients) {
		t.Errorf("pgbench references on PostgreSQL: %v, want %v", got, pgbenchClients)
	}
}

func TestSQLiteRowsHaveRiverDefaultsAsAReference(t *testing.T) {
	t.Parallel()
	for _, lite := range []bool{false, true} {
		b := &bench{opt: options{sqlite: lite, backlog: 10, rates: []int{200}}}
		for _, r := range b.rows() {
			if strings.HasPrefix(r.RefName, "River defaults") && r.Info == lite {
				t.Fatalf("sqlite=%t: %q beside %q has Info %t", lite, r.Figure, r.RefName, r.Info)
			}
			// The producer figure is not measured on SQLite: its rows stay empty.
			if lite && strings.HasPrefix(r.RefName, "pgbench") && !strings.HasPrefix(r.Figure, "producer") {
				t.Fatalf("a pgbench reference in the SQLite table: %+v", r)
			}
		}
	}
}

func TestStampSQL(t *testing.T) {
	t.Parallel()
	for table, keys := range stampKeys {
		for i, lite := range []bool{false, true} {
			s := stampSQL(lite, table)
			if !strings.Contains(s, "ON "+table) || !strings.Contains(s, keys[i]) {
				t.Errorf("stampSQL(%t, %s) does not stamp %s by %s:\n%s", lite, table, table, keys[i], s)
			}
		}
		if stampIf(false, true, table) != "" || stampIf(true, true, table) != stampSQL(true, table) {
			t.Errorf("stampIf(%s): a stamp only when asked", table)
		}
	}
	if analyzedTable(false, "t") != "" || analyzedTable(true, "t") != "t" {
		t.Error("analyzedTable: the table only when analyzed")
	}
}

func TestNoRowAs(t *testing.T) {
	t.Parallel()
	other := errors.New("other")
	if !errors.Is(noRowAs(sql.ErrNoRows, sql.ErrNoRows), errNoRow) {
		t.Error("a driver's no rows is not errNoRow")
	}
	if noRowAs(other, sql.ErrNoRows) != other || noRowAs(nil, sql.ErrNoRows) != nil {
		t.Error("noRowAs changed an error that is not no rows")
	}
}

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
		stampSQL(true, "billing_receipts")); err != nil {
		t.Fatal(err)
	}
	q, err := openProbe(path)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()

	if at, err := q.at(ctx, liteProbes.receiptsEnd); err != nil || at != nil {
		t.Fatalf("end stamp of no receipt = %v, %v; want nil", at, err)
	}
	id := uuid.New()
	before := time.Now()
	start, err := liteCommit(ctx, w, "", func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO billing_receipts (event_id, created_at) VALUES (?1, 0)`, id.String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if start.Before(before) || start.After(after) {
		t.Errorf("liteCommit's start %s is not within its call (%s to %s)", start, before, after)
	}
	stamps, err := q.stamps(ctx)
	if err != nil {
		t.Fatal(err)
	}
	at, ok := stamps[id]
	// The trigger's clock is this host's, in ms, taken inside the transaction.
	if !ok || at.Before(before.Truncate(time.Millisecond)) || at.After(start) {
		t.Fatalf("stamps = %v; want %s stamped between %s and %s", stamps, id, before, start)
	}
	end, err := stampOf(ctx, q, liteProbes.receiptsEnd)()
	if err != nil || !end.Equal(at) {
		t.Fatalf("receipts' end stamp = %s, %v; want %s", end, err, at)
	}
	var n int
	if err := q.one(ctx, liteProbes.receiptsCount, &n); err != nil || n != 1 {
		t.Fatalf("receipts counted %d, %v; want 1", n, err)
	}

	// River's times are text, UTC, to the ms.
	if _, err := w.ExecContext(ctx, `INSERT INTO river_job (finalized_at) VALUES ('2026-12-02 01:02:03.456'), ('2026-12-02 01:02:03.455'), (NULL)`); err != nil {
		t.Fatal(err)
	}
	got, err := stampOf(ctx, q, liteProbes.riverEnd)()
	if want := time.Date(2026, 12, 2, 1, 2, 3, 456e6, time.UTC); err != nil || !got.Equal(want) {
		t.Fatalf("River's end stamp = %s, %v; want %s", got, err, want)
	}

	if pending, err := noRow(ctx, q, `SELECT 1 FROM river_job WHERE id < 0`)(); err != nil || !pending {
		t.Fatalf("noRow on no row = %t, %v; want true", pending, err)
	}
}

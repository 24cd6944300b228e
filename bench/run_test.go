package main

import (
	"strings"
	"testing"

	"github.com/acme/outboxpair/bench/internal/sitting"
)

func TestWantOnSQLite(t *testing.T) {
	t.Parallel()
	b := &bench{Sitting: &sitting.Sitting{Opt: sitting.Options{SQLite: true}}}
	for _, w := range workloadNames {
		if got, want := b.want(w), contains(sqliteWorkloads, w); got != want {
			t.Errorf("want(%q) with -sqlite and no -only = %t, want %t", w, got, want)
		}
	}
	b.Opt.Only = "latency"
	if b.want("noop") || !b.want("latency") {
		t.Errorf("-only latency: want(noop) = %t, want(latency) = %t", b.want("noop"), b.want("latency"))
	}
	if got := b.pgbenchClients(); len(got) != 0 {
		t.Errorf("pgbench references on SQLite: %v, want none", got)
	}
	if got := (&bench{Sitting: &sitting.Sitting{}}).pgbenchClients(); len(got) != len(pgbenchClients) {
		t.Errorf("pgbench references on PostgreSQL: %v, want %v", got, pgbenchClients)
	}
}

func TestSQLiteRowsHaveRiverDefaultsAsAReference(t *testing.T) {
	t.Parallel()
	for _, lite := range []bool{false, true} {
		b := &bench{Sitting: &sitting.Sitting{Opt: sitting.Options{SQLite: lite, Backlog: 10, Rates: []int{200}}}}
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

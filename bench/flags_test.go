package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/acme/outboxpair/bench/internal/sitting"
)

func TestRiverFlag(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"by default both variants run", nil, []string{"river", "river-1ms"}},
		{"one variant runs alone", []string{"-river", "river-1ms"}, []string{"river-1ms"}},
		{"none runs no River", []string{"-river", "none"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o, err := parseFlags(tc.args)
			if err != nil {
				t.Fatalf("parseFlags(%q): %v", tc.args, err)
			}
			var got []string
			for _, v := range (&bench{Sitting: &sitting.Sitting{Opt: o}}).rivers() {
				got = append(got, v.Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("-river from %q runs %v, want %v", tc.args, got, tc.want)
			}
		})
	}
	t.Run("an unknown variant is refused", func(t *testing.T) {
		t.Parallel()
		if _, err := parseFlags([]string{"-river", "river-2ms"}); err == nil || !strings.Contains(err.Error(), `unknown variant "river-2ms"`) {
			t.Fatalf("parseFlags(-river river-2ms) = %v, want the unknown variant named", err)
		}
	})
	t.Run("the defaults cluster is refused on SQLite", func(t *testing.T) {
		t.Parallel()
		if _, err := parseFlags([]string{"-sqlite", "-pg-defaults"}); err == nil || !strings.Contains(err.Error(), "no PostgreSQL") {
			t.Fatalf("parseFlags(-sqlite -pg-defaults) = %v, want a refusal", err)
		}
	})
}

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

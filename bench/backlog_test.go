package main

import (
	"slices"
	"strings"
	"testing"
	"time"
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
			for _, v := range (&bench{opt: o}).rivers() {
				got = append(got, v.name)
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

func TestProbeEvery(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		waited time.Duration
		want   time.Duration
	}{
		{"a drain just started is probed every 20ms", 0, 20 * time.Millisecond},
		{"a drain of 10s is probed every 200ms", 10 * time.Second, 200 * time.Millisecond},
		{"a long drain is probed every 500ms at most", 10 * time.Minute, 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := probeEvery(tc.waited); got != tc.want {
				t.Fatalf("probeEvery(%s) = %s, want %s", tc.waited, got, tc.want)
			}
		})
	}
}

func TestJoinDefaultsCluster(t *testing.T) {
	t.Parallel()
	usual, other := newResults(), newResults()
	usual.add("scale/big/project", 10)
	other.add("scale/big/project", 7)
	other.add("scale/big/river-1ms", 5)
	other.note("drain cut off")
	rows := usual.join(other, []row{{Figure: "no-op drain 1000000", Project: "scale/big/project", RefName: "River tuned", Ref: "scale/big/river-1ms"}})

	if len(rows) != 1 || rows[0].Figure != "no-op drain 1000000"+defaultsSuffix {
		t.Fatalf("joined rows %+v, want the one row suffixed %q", rows, defaultsSuffix)
	}
	if p, _ := usual.median(rows[0].Project); p != 7 {
		t.Fatalf("the joined row's project value is %v, want the defaults cluster's 7", p)
	}
	if r, _ := usual.median(rows[0].Ref); r != 5 {
		t.Fatalf("the joined row's reference value is %v, want the defaults cluster's 5", r)
	}
	if p, _ := usual.median("scale/big/project"); p != 10 {
		t.Fatalf("the usual sitting's value is %v after the join, want 10 untouched", p)
	}
	if !slices.Contains(usual.notes, "defaults cluster: drain cut off") {
		t.Fatalf("notes %q lack the defaults cluster's, prefixed", usual.notes)
	}
}

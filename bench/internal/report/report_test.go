package report

import (
	"math"
	"slices"
	"strings"
	"testing"
)

func TestMedian(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   []float64
		want float64
	}{
		{"odd count is the middle value", []float64{5, 1, 3}, 3},
		{"even count is the mean of the middle two", []float64{4, 1, 3, 2}, 2.5},
		{"one value is itself", []float64{7}, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Median(tc.in); got != tc.want {
				t.Fatalf("median(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	t.Run("no values is NaN", func(t *testing.T) {
		t.Parallel()
		if got := Median(nil); !math.IsNaN(got) {
			t.Fatalf("median(nil) = %v, want NaN", got)
		}
	})
	t.Run("the input is not reordered", func(t *testing.T) {
		t.Parallel()
		in := []float64{3, 1, 2}
		Median(in)
		if in[0] != 3 || in[1] != 1 || in[2] != 2 {
			t.Fatalf("median sorted its input: %v", in)
		}
	})
}

func TestRatio(t *testing.T) {
	t.Parallel()
	if got := ratio(3, 2); got != 1.5 {
		t.Fatalf("ratio(3, 2) = %v", got)
	}
	if got := ratio(math.Inf(1), 2); !math.IsInf(got, 1) {
		t.Fatalf("ratio(+Inf, 2) = %v, want +Inf", got)
	}
	for _, c := range [][2]float64{{1, 0}, {math.NaN(), 1}, {1, math.NaN()}, {math.Inf(1), math.Inf(1)}} {
		if got := ratio(c[0], c[1]); !math.IsNaN(got) {
			t.Fatalf("ratio(%v, %v) = %v, want NaN", c[0], c[1], got)
		}
	}
}

func TestFormatValue(t *testing.T) {
	t.Parallel()
	for in, want := range map[float64]string{
		12345.6: "12346", 123.45: "123.5", 1.234: "1.23", 0.01234: "0.012", 0: "0", 2278: "2278", math.NaN(): "-", math.Inf(1): "inf",
	} {
		if got := FormatValue(in); got != want {
			t.Errorf("FormatValue(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	res := NewResults()
	for _, v := range []float64{100, 300, 200} {
		res.Add("p", v)
	}
	res.Add("ref", 400)
	var b strings.Builder
	writeTable(&b, res, []Row{
		{Figure: "drain", Unit: "rows/s", Project: "p", RefName: "river", Ref: "ref"},
		{Figure: "no project figure", Unit: "rows/s", Project: "absent", RefName: "river", Ref: "ref"},
		{Figure: "no reference figure", Unit: "rows/s", Project: "p", RefName: "nats", Ref: "absent"},
		{Figure: "drain", Unit: "rows/s", Project: "p", RefName: "river defaults", Ref: "ref", Info: true},
	})
	lines := strings.Split(strings.TrimSuffix(b.String(), "\n"), "\n")
	if len(lines) != 5 {
		t.Fatalf("want a header, a separator and 2 rows (the row without a project figure left out), got:\n%s", b.String())
	}
	cells := func(line string) []string {
		var out []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			out = append(out, strings.TrimSpace(c))
		}
		return out
	}
	if got, want := strings.Join(cells(lines[2]), ","), "drain,rows/s,200,river,400,0.50,3/1"; got != want {
		t.Fatalf("row = %s, want %s", got, want)
	}
	if got, want := strings.Join(cells(lines[3]), ","), "no reference figure,rows/s,200,nats,-,-,3/0"; got != want {
		t.Fatalf("row = %s, want %s", got, want)
	}
	if got, want := strings.Join(cells(lines[4]), ","), "drain,rows/s,200,river defaults,400,info,3/1"; got != want {
		t.Fatalf("an information row shows its value but no ratio: row = %s, want %s", got, want)
	}
	for i, l := range lines {
		if len([]rune(l)) != len([]rune(lines[0])) {
			t.Fatalf("line %d is not padded to the header's width:\n%s", i, b.String())
		}
	}
}

func TestJoinDefaultsCluster(t *testing.T) {
	t.Parallel()
	usual, other := NewResults(), NewResults()
	usual.Add("scale/big/project", 10)
	other.Add("scale/big/project", 7)
	other.Add("scale/big/river-1ms", 5)
	other.Note("drain cut off")
	rows := usual.Join(other, []Row{{Figure: "no-op drain 1000000", Project: "scale/big/project", RefName: "River tuned", Ref: "scale/big/river-1ms"}})

	if len(rows) != 1 || rows[0].Figure != "no-op drain 1000000"+DefaultsSuffix {
		t.Fatalf("joined rows %+v, want the one row suffixed %q", rows, DefaultsSuffix)
	}
	if p, _ := usual.Median(rows[0].Project); p != 7 {
		t.Fatalf("the joined row's project value is %v, want the defaults cluster's 7", p)
	}
	if r, _ := usual.Median(rows[0].Ref); r != 5 {
		t.Fatalf("the joined row's reference value is %v, want the defaults cluster's 5", r)
	}
	if p, _ := usual.Median("scale/big/project"); p != 10 {
		t.Fatalf("the usual sitting's value is %v after the join, want 10 untouched", p)
	}
	if !slices.Contains(usual.notes, "defaults cluster: drain cut off") {
		t.Fatalf("notes %q lack the defaults cluster's, prefixed", usual.notes)
	}
}

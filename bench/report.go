package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// results gathers one value per round for each measurement key, plus notes
// (skipped rows and why) that the report prints under the table.
type results struct {
	mu    sync.Mutex
	vals  map[string][]float64
	notes []string
}

func newResults() *results { return &results{vals: map[string][]float64{}} }

func (r *results) add(key string, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.vals[key] = append(r.vals[key], v)
}

func (r *results) note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if !slices.Contains(r.notes, msg) {
		r.notes = append(r.notes, msg)
	}
}

// median returns the median of key's values and how many there are.
func (r *results) median(key string) (float64, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.vals[key]
	if len(v) == 0 {
		return math.NaN(), 0
	}
	return median(v), len(v)
}

// median is the middle value (the mean of the two middle ones for an even count).
func median(v []float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// row is one line of the table: a figure of the project beside one reference.
// Keys name result series; an empty Ref prints the project's figure alone. An
// Info reference (River at its defaults) is shown for information only: its
// ratio is never computed, so nothing can be read as a target against it.
type row struct {
	Figure  string
	Unit    string
	Project string
	RefName string
	Ref     string
	Info    bool
}

// ratio is project / reference; NaN when either is missing, the reference is
// 0, or both are +Inf (a latency neither system reached).
func ratio(p, ref float64) float64 {
	if math.IsNaN(p) || math.IsNaN(ref) || ref == 0 || (math.IsInf(p, 0) && math.IsInf(ref, 0)) {
		return math.NaN()
	}
	return p / ref
}

// formatValue prints v with a precision that suits its size.
func formatValue(v float64) string {
	switch a := math.Abs(v); {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "inf"
	case v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 100:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3f", v)
	}
}

func formatRatio(v float64) string {
	switch {
	case math.IsNaN(v):
		return "-"
	case math.IsInf(v, 1):
		return "inf"
	}
	return fmt.Sprintf("%.2f", v)
}

// writeTable prints rows as a Markdown table (aligned, so it reads as text too):
// the figure, its unit, the project's median, the reference's name and median,
// the ratio project / reference, and how many rounds each median is of.
func writeTable(w io.Writer, res *results, rows []row) {
	header := []string{"figure", "unit", "project", "reference", "ref. value", "ratio", "n"}
	var cells [][]string
	for _, r := range rows {
		p, np := res.median(r.Project)
		ref, nr := math.NaN(), 0
		if r.Ref != "" {
			ref, nr = res.median(r.Ref)
		}
		if np == 0 {
			continue
		}
		fig := r.Figure
		n := fmt.Sprint(np)
		if r.Ref != "" {
			n = fmt.Sprintf("%d/%d", np, nr)
		}
		rat := formatRatio(ratio(p, ref))
		if r.Info {
			rat = "info"
		}
		cells = append(cells, []string{fig, r.Unit, formatValue(p), orDash(r.RefName),
			formatValue(ref), rat, n})
	}
	io.WriteString(w, markdownTable(header, cells))
}

// markdownTable renders a Markdown table whose columns are padded to one width.
func markdownTable(header []string, rows [][]string) string {
	width := make([]int, len(header))
	for i, h := range header {
		width[i] = utf8.RuneCountInString(h)
	}
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	var b strings.Builder
	line := func(cells []string) {
		b.WriteString("|")
		for i, c := range cells {
			b.WriteString(" " + c + strings.Repeat(" ", width[i]-utf8.RuneCountInString(c)) + " |")
		}
		b.WriteString("\n")
	}
	line(header)
	sep := make([]string, len(header))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
	}
	line(sep)
	for _, r := range rows {
		line(r)
	}
	return b.String()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// writeReport prints the machine, the table and the notes.
func writeReport(w io.Writer, m machine, o options, res *results, rows []row, took time.Duration) {
	fmt.Fprintf(w, "\n## Results (%s, %d round(s), medians; took %s)\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), o.rounds, took.Round(time.Second))
	fmt.Fprintf(w, "- host: %s; CPU: %s, %s cores\n- %s: %s\n", m.Host, m.CPU, m.Cores, m.DBName, m.DBVersion)
	var set []string
	for _, s := range m.Settings {
		set = append(set, s[0]+"="+s[1])
	}
	fmt.Fprintf(w, "- settings: %s\n", strings.Join(set, ", "))
	fmt.Fprintf(w, "- options: %s\n", o.summary())
	fmt.Fprintf(w, "- relay (in process and binaries alike): %s\n\n", m.Relay)
	writeTable(w, res, rows)
	if len(res.notes) > 0 {
		fmt.Fprintln(w, "\nNotes:")
		for _, n := range res.notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
}

// last returns key's latest value.
func (r *results) last(key string) (float64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.vals[key]
	if len(v) == 0 {
		return math.NaN(), false
	}
	return v[len(v)-1], true
}

// Package report is what the benchmark tells its reader: the values of every
// round, the table of their medians with the notes under it and the machine
// they were taken on (stdout), and the progress lines (stderr).
package report

import (
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// Results gathers one value per round for each measurement key, plus notes
// (skipped rows and why) that the report prints under the table. It is safe
// for concurrent use.
type Results struct {
	mu    sync.Mutex
	vals  map[string][]float64
	notes []string
}

// NewResults is an empty Results.
func NewResults() *Results { return &Results{vals: map[string][]float64{}} }

// Add appends v to key's values.
func (r *Results) Add(key string, v float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.vals[key] = append(r.vals[key], v)
}

// Note adds a note, formatted as fmt.Sprintf does; a note already there is
// not repeated.
func (r *Results) Note(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := fmt.Sprintf(format, args...)
	if !slices.Contains(r.notes, msg) {
		r.notes = append(r.notes, msg)
	}
}

// Median returns the median of key's values and how many there are (NaN and
// 0 for none).
func (r *Results) Median(key string) (float64, int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.vals[key]
	if len(v) == 0 {
		return math.NaN(), 0
	}
	return Median(v), len(v)
}

// Last returns key's latest value (NaN and false for none).
func (r *Results) Last(key string) (float64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v := r.vals[key]
	if len(v) == 0 {
		return math.NaN(), false
	}
	return v[len(v)-1], true
}

// Median is the middle value (the mean of the two middle ones for an even
// count; NaN for none). v is not reordered.
func Median(v []float64) float64 {
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

// DefaultsSuffix ends the figure of every row measured on the defaults cluster.
const DefaultsSuffix = " (defaults cluster)"

// Join adds other's figures and notes to r under the key prefix "defaults/",
// and returns rows, which read other, as rows that read them there, suffixed
// DefaultsSuffix. r's own values are untouched.
func (r *Results) Join(other *Results, rows []Row) []Row {
	const prefix = "defaults/"
	other.mu.Lock()
	for k, v := range other.vals {
		for _, x := range v {
			r.Add(prefix+k, x)
		}
	}
	notes := slices.Clone(other.notes)
	other.mu.Unlock()
	for _, n := range notes {
		r.Note("defaults cluster: %s", n)
	}
	out := make([]Row, 0, len(rows))
	for _, x := range rows {
		x.Figure += DefaultsSuffix
		x.Project = prefix + x.Project
		if x.Ref != "" {
			x.Ref = prefix + x.Ref
		}
		out = append(out, x)
	}
	return out
}

// Row is one line of the table: a figure of the project beside one reference.
// Keys name result series; an empty Ref prints the project's figure alone. An
// Info reference (River at its defaults) is shown for information only: its
// ratio is never computed, so nothing can be read as a target against it.
type Row struct {
	Figure  string // what is measured, as the table names it
	Unit    string
	Project string // the key of the project's values
	RefName string // the reference, as the table names it
	Ref     string // the key of the reference's values ("": none)
	Info    bool   // the reference is information only: no ratio
}

// ratio is project / reference; NaN when either is missing, the reference is
// 0, or both are +Inf (a latency neither system reached).
func ratio(p, ref float64) float64 {
	if math.IsNaN(p) || math.IsNaN(ref) || ref == 0 || (math.IsInf(p, 0) && math.IsInf(ref, 0)) {
		return math.NaN()
	}
	return p / ref
}

// FormatValue prints v with a precision that suits its size ("-" for NaN,
// "inf" for +Inf).
func FormatValue(v float64) string {
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
func writeTable(w io.Writer, res *Results, rows []Row) {
	header := []string{"figure", "unit", "project", "reference", "ref. value", "ratio", "n"}
	var cells [][]string
	for _, r := range rows {
		p, np := res.Median(r.Project)
		ref, nr := math.NaN(), 0
		if r.Ref != "" {
			ref, nr = res.Median(r.Ref)
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
		cells = append(cells, []string{fig, r.Unit, FormatValue(p), orDash(r.RefName),
			FormatValue(ref), rat, n})
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

// Write prints the report: the machine, the options (as options sums them
// up), the table of res's medians for rows, and the notes.
func Write(w io.Writer, m Machine, rounds int, options string, res *Results, rows []Row, took time.Duration) {
	fmt.Fprintf(w, "\n## Results (%s, %d round(s), medians; took %s)\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), rounds, took.Round(time.Second))
	fmt.Fprintf(w, "- host: %s; CPU: %s, %s cores\n- %s: %s\n", m.Host, m.CPU, m.Cores, m.DBName, m.DBVersion)
	var set []string
	for _, s := range m.Settings {
		set = append(set, s[0]+"="+s[1])
	}
	fmt.Fprintf(w, "- settings: %s\n", strings.Join(set, ", "))
	fmt.Fprintf(w, "- options: %s\n", options)
	fmt.Fprintf(w, "- relay (in process and binaries alike): %s\n\n", m.Relay)
	writeTable(w, res, rows)
	if len(res.notes) > 0 {
		fmt.Fprintln(w, "\nNotes:")
		for _, n := range res.notes {
			fmt.Fprintf(w, "- %s\n", n)
		}
	}
}

// Logf prints one progress line on stderr, stamped with the time of day.
func Logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

// Tail is the end of the log file at path (its last 2,000 bytes), as an error
// about the process that wrote it quotes it.
func Tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

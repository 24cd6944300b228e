package console

import (
	"fmt"
	"html/template"
	"runtime/debug"
	"strconv"
	"strings"
)

// BarChart draws values (oldest first, one bar each) as an inline SVG bar chart
// titled title, server-side: no script. Every part of it is numbers and the
// escaped title, so it is safe to mark as HTML.
func BarChart(title string, values []int64) template.HTML {
	const w, h, pad = 600, 120, 20
	var maxV int64 = 1
	var total int64
	for _, v := range values {
		maxV = max(maxV, v)
		total += v
	}
	var b strings.Builder
	t := template.HTMLEscapeString(title)
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" role="img" aria-label="%s: %d in all, at most %d in a minute">`,
		w, h+pad, w, h+pad, t, total, maxV)
	fmt.Fprintf(&b, `<title>%s</title>`, t)
	if n := len(values); n > 0 {
		bw := float64(w) / float64(n)
		for i, v := range values {
			bh := float64(v) / float64(maxV) * float64(h-pad)
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#1f5fa8"></rect>`,
				float64(i)*bw+1, float64(h)-bh, bw-2, bh)
		}
	}
	fmt.Fprintf(&b, `<line x1="0" y1="%d" x2="%d" y2="%d" stroke="#1a1a1a"></line>`, h, w, h)
	fmt.Fprintf(&b, `<text x="0" y="%d">-%dm</text><text x="%d" y="%d" text-anchor="end">now · max %d/min</text></svg>`,
		h+14, len(values), w, h+14, maxV)
	return template.HTML(b.String()) //nolint:gosec // built from numbers and an escaped title only
}

// Version is the binary's module version and VCS revision, as Go recorded them
// at build time ("devel" when neither is known).
func Version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "devel"
	}
	v := info.Main.Version
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && len(s.Value) >= 12 {
			v += " (" + s.Value[:12] + ")"
		}
	}
	if v == "" {
		return "devel"
	}
	return v
}

// count shows n, or cap+ when a bounded count reached past cap.
func count(n, limit int64) string {
	if n > limit {
		return strconv.FormatInt(limit, 10) + "+"
	}
	return strconv.FormatInt(n, 10)
}

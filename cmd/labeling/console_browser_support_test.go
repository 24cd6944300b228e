package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// What the browser test needs beyond Go besides Chromium: axe-core (the npm
// package, 4.x), loaded into every page the test visits. Never committed here.
const axeInstall = "npm install --no-save --no-package-lock --prefix . axe-core@4.14.1 (in the repository's root; .ci/run does), or set AXE_CORE_JS to an axe.min.js"

// refreshShots is the command that rewrites the console's screenshots and
// their structure outlines under docs/img.
const refreshShots = "CONSOLE_SCREENSHOTS=docs/img go test -count=1 -run TestConsoleInBrowser ./cmd/labeling/"

// repoRoot is the module's root (the tests run in cmd/labeling).
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := proctest.ModuleRoot()
	require.NoError(t, err)
	return root
}

// axeSource returns axe.min.js: $AXE_CORE_JS, else node_modules/axe-core under
// the repository's root. The test fails (never skips) without it.
func axeSource(t *testing.T) string {
	t.Helper()
	path := os.Getenv("AXE_CORE_JS")
	if path == "" {
		path = filepath.Join(repoRoot(t), "node_modules", "axe-core", "axe.min.js")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("no axe-core for the browser test (%v): %s", err, axeInstall)
	}
	return string(b)
}

// axeViolation is one rule axe-core found violated on a page.
type axeViolation struct {
	ID     string   `json:"id"`
	Impact string   `json:"impact"`
	Help   string   `json:"help"`
	Nodes  []string `json:"nodes"`
}

// axeChecker runs axe-core in pages and keeps what it found, page by page.
type axeChecker struct {
	src string

	mu      sync.Mutex
	version string
	pages   []string
	found   map[string][]axeViolation
}

func newAxeChecker(t *testing.T) *axeChecker {
	return &axeChecker{src: axeSource(t), found: map[string][]axeViolation{}}
}

// check loads axe-core into the page ctx shows now and runs it over the whole
// document. Runtime.evaluate is not subject to the page's
// Content-Security-Policy (which allows no script), so the console's own
// headers stay as they are. Every violation is logged and fails the test,
// whatever its impact.
func (a *axeChecker) check(t *testing.T, ctx context.Context, page string) {
	t.Helper()
	var version string
	var vs []axeViolation
	require.NoError(t, chromedp.Run(ctx,
		chromedp.Evaluate(a.src+"\n;axe.version", &version),
		chromedp.Evaluate(`axe.run(document, {resultTypes: ['violations']}).then(r => r.violations.map(v => ({
			id: v.id, impact: v.impact || '', help: v.help, nodes: v.nodes.map(n => n.target.join(' '))})))`, &vs,
			func(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }),
	), "axe-core on %s", page)
	require.True(t, strings.HasPrefix(version, "4."), "axe-core %s: the test expects 4.x", version)
	var bad []string
	for _, v := range vs {
		t.Logf("axe-core %s on %s: %s (%s): %s, at %s", version, page, v.ID, v.Impact, v.Help, strings.Join(v.Nodes, "; "))
		bad = append(bad, v.ID+" ("+v.Impact+")")
	}
	a.mu.Lock()
	a.version = version
	a.pages = append(a.pages, page)
	a.found[page] = vs
	a.mu.Unlock()
	require.Empty(t, bad, "axe-core found violations on %s (any impact fails)", page)
}

// summary is one line per page checked: how many violations of each impact.
func (a *axeChecker) summary() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "axe-core %s, violations by impact:", a.version)
	for _, p := range a.pages {
		by := map[string]int{}
		for _, v := range a.found[p] {
			by[v.Impact]++
		}
		var parts []string
		for _, impact := range []string{"critical", "serious", "moderate", "minor"} {
			parts = append(parts, fmt.Sprintf("%s %d", impact, by[impact]))
			delete(by, impact)
		}
		other := make([]string, 0, len(by))
		for impact, n := range by {
			other = append(other, fmt.Sprintf("%q %d", impact, n))
		}
		sort.Strings(other)
		fmt.Fprintf(&b, "\n  %s: %s", p, strings.Join(append(parts, other...), ", "))
	}
	return b.String()
}

// outlineJS is the structure of the page's <main>: one line per element, its
// tag name with its id and classes, indented by depth; text, attributes, ids
// holding a UUID and repeats are dropped (a sibling whose subtree's outline
// equals the previous sibling's is left out), so the outline changes when the
// page's structure does, and not with its data.
const outlineJS = `(() => {
	const uuid = /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/i;
	const name = el => {
		let s = el.tagName.toLowerCase();
		const id = el.getAttribute('id'); // not el.id: a form's field named id shadows it
		if (id && !uuid.test(id)) s += '#' + id;
		for (const c of el.classList) s += '.' + c;
		return s;
	};
	const walk = (el, depth) => {
		const out = [];
		let prev = null;
		for (const child of el.children) {
			const lines = ['  '.repeat(depth) + name(child), ...walk(child, depth + 1)];
			const key = lines.join('\n');
			if (key !== prev) out.push(...lines);
			prev = key;
		}
		return out;
	};
	const main = document.querySelector('main');
	return main ? [name(main), ...walk(main, 1)].join('\n') + '\n' : '';
})()`

// shots makes the docs' screenshots of console pages and holds their
// structure outlines: with CONSOLE_SCREENSHOTS set it writes a PNG and an
// outline per page there (relative to the repository's root); otherwise it
// compares each page's outline with docs/img's and fails when the page's
// structure changed, so that the committed screenshot would be stale.
type shots struct {
	dir   string // where the committed outlines are, or where to write
	write bool
}

func newShots(t *testing.T) shots {
	root := repoRoot(t)
	dir := os.Getenv("CONSOLE_SCREENSHOTS")
	if dir == "" {
		return shots{dir: filepath.Join(root, "docs", "img")}
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(root, dir)
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	return shots{dir: dir, write: true}
}

// shoot outlines (and, when writing, screenshots) the page ctx shows now as name.
func (s shots) shoot(t *testing.T, ctx context.Context, name, what string) {
	t.Helper()
	var outline string
	require.NoError(t, chromedp.Run(ctx, chromedp.Evaluate(outlineJS, &outline)))
	require.NotEmpty(t, outline, "%s has no <main>", what)
	header := "# The structure of <main> on " + what + ", as docs/img/" + name + ".png shows it\n" +
		"# (tag#id.class by depth; text and repeats dropped). Written by:\n# " + refreshShots + "\n"
	outlinePath := filepath.Join(s.dir, name+".structure.txt")
	if s.write {
		var png []byte
		require.NoError(t, chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)))
		require.NoError(t, os.WriteFile(filepath.Join(s.dir, name+".png"), png, 0o644))
		require.NoError(t, os.WriteFile(outlinePath, []byte(header+outline), 0o644))
		t.Logf("wrote %s.png and %s.structure.txt in %s", name, name, s.dir)
		return
	}
	b, err := os.ReadFile(outlinePath)
	require.NoError(t, err, "the structure outline of %s; write it with: %s", what, refreshShots)
	var want []string
	for _, l := range strings.SplitAfter(string(b), "\n") {
		if !strings.HasPrefix(l, "#") {
			want = append(want, l)
		}
	}
	require.Equal(t, strings.Join(want, ""), outline,
		"the structure of %s changed, so docs/img/%s.png is stale: refresh the screenshots with\n  %s\nand commit them", what, name, refreshShots)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/outbox"
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
			if got := median(tc.in); got != tc.want {
				t.Fatalf("median(%v) = %v, want %v", tc.in, got, tc.want)
			}
		})
	}
	t.Run("no values is NaN", func(t *testing.T) {
		t.Parallel()
		if got := median(nil); !math.IsNaN(got) {
			t.Fatalf("median(nil) = %v, want NaN", got)
		}
	})
	t.Run("the input is not reordered", func(t *testing.T) {
		t.Parallel()
		in := []float64{3, 1, 2}
		median(in)
		if in[0] != 3 || in[1] != 1 || in[2] != 2 {
			t.Fatalf("median sorted its input: %v", in)
		}
	})
}

func TestLatencyOver(t *testing.T) {
	t.Parallel()
	ms := func(n ...int) []time.Duration {
		var d []time.Duration
		for _, v := range n {
			d = append(d, time.Duration(v)*time.Millisecond)
		}
		return d
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = i + 1
	}
	inf := math.Inf(1)
	for _, tc := range []struct {
		name    string
		sorted  []time.Duration
		offered int
		p       float64
		want    float64
	}{
		{"p50 of 1..100 all applied is 50 (nearest rank)", ms(hundred...), 100, 50, 50},
		{"p99 of 1..100 all applied is 99", ms(hundred...), 100, 99, 99},
		{"p100 is the maximum", ms(hundred...), 100, 100, 100},
		{"p99 of a few values is the largest", ms(1, 2, 3), 3, 99, 3},
		{"p50 of two values is the lower", ms(1, 2), 2, 50, 1},
		{"a tiny p is the minimum", ms(4, 5, 6), 3, 0.001, 4},
		{"one event of 100 never applied makes p100 +Inf", ms(hundred[:99]...), 100, 100, inf},
		{"one event of 100 never applied leaves p99 measured", ms(hundred[:99]...), 100, 99, 99},
		{"two of 100 never applied make p99 +Inf", ms(hundred[:98]...), 100, 99, inf},
		{"half never applied: p50 is the last applied", ms(hundred[:50]...), 100, 50, 50},
		{"more than half never applied: p50 is +Inf", ms(hundred[:49]...), 100, 50, inf},
		{"nothing applied of some offered is +Inf", nil, 10, 50, inf},
		{"fewer offered than applied counts the applied", ms(1, 2, 3, 4), 2, 100, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := latencyOver(tc.sorted, tc.offered, tc.p)[0]
			if got != tc.want {
				t.Fatalf("latencyOver(p%v, %d applied of %d offered) = %v, want %v", tc.p, len(tc.sorted), tc.offered, got, tc.want)
			}
		})
	}
	t.Run("nothing offered is NaN", func(t *testing.T) {
		t.Parallel()
		if got := latencyOver(nil, 0, 50)[0]; !math.IsNaN(got) {
			t.Fatalf("got %v, want NaN", got)
		}
	})
}

func TestUnapplied(t *testing.T) {
	t.Parallel()
	l := latency{applied: 90, gen: offered{total: 100, late: 4, failed: 2}}
	if got := l.unapplied(); got != 10 {
		t.Fatalf("unapplied = %d, want 10 (100 offered, 90 applied: skipped, failed and missing alike)", got)
	}
}

func TestRateOf(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	t.Run("rows drained over the stamped interval", func(t *testing.T) {
		t.Parallel()
		got, err := rateOf(1000, 0, start, start.Add(500*time.Millisecond))
		if err != nil || got != 2000 {
			t.Fatalf("rateOf = %v, %v; want 2000", got, err)
		}
	})
	t.Run("a cut-off drain counts only the rows drained", func(t *testing.T) {
		t.Parallel()
		got, err := rateOf(1000, 400, start, start.Add(time.Second))
		if err != nil || got != 600 {
			t.Fatalf("rateOf = %v, %v; want 600", got, err)
		}
	})
	t.Run("an end stamped before the commit is an error", func(t *testing.T) {
		t.Parallel()
		if _, err := rateOf(1000, 0, start, start); err == nil {
			t.Fatal("no error for an empty interval")
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
		if got := formatValue(in); got != want {
			t.Errorf("formatValue(%v) = %q, want %q", in, got, want)
		}
	}
}

func TestWriteTable(t *testing.T) {
	t.Parallel()
	res := newResults()
	for _, v := range []float64{100, 300, 200} {
		res.add("p", v)
	}
	res.add("ref", 400)
	var b strings.Builder
	writeTable(&b, res, []row{
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

func TestRelayConfig(t *testing.T) {
	t.Parallel()
	none := func(string) (string, bool) { return "", false }
	t.Run("defaults are the binaries': OUTBOX_NOTIFY on and OUTBOX_WORKERS", func(t *testing.T) {
		t.Parallel()
		c, err := relayConfig(none, "")
		if err != nil {
			t.Fatal(err)
		}
		if !c.Notify || c.Workers != outbox.DefaultWorkers || c.ClaimSize <= 0 || c.Lease <= 0 || c.MaxAttempts <= 0 {
			t.Fatalf("not the binaries' defaults: %+v", c)
		}
	})
	t.Run("the environment the binaries inherit sets the in-process relay too", func(t *testing.T) {
		t.Parallel()
		c, err := relayConfig(func(name string) (string, bool) {
			switch name {
			case "OUTBOX_NOTIFY":
				return "false", true
			case "OUTBOX_WORKERS":
				return "7", true
			}
			return "", false
		}, "")
		if err != nil {
			t.Fatal(err)
		}
		if c.Notify || c.Workers != 7 {
			t.Fatalf("environment not applied: %+v", c)
		}
	})
	t.Run("a bad variable is an error naming it", func(t *testing.T) {
		t.Parallel()
		_, err := relayConfig(func(name string) (string, bool) { return "many", name == "OUTBOX_WORKERS" }, "")
		if err == nil || !strings.Contains(err.Error(), "OUTBOX_WORKERS") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("fields are set by name", func(t *testing.T) {
		t.Parallel()
		c, err := relayConfig(none, "ClaimSize=5, PollInterval=250ms")
		if err != nil {
			t.Fatal(err)
		}
		if c.ClaimSize != 5 || c.PollInterval != 250*time.Millisecond {
			t.Fatalf("not applied: %+v", c)
		}
	})
	t.Run("an unknown field is an error naming it", func(t *testing.T) {
		t.Parallel()
		_, err := relayConfig(none, "NoSuchField=1")
		if err == nil || !strings.Contains(err.Error(), "NoSuchField") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a bad value is an error", func(t *testing.T) {
		t.Parallel()
		if _, err := relayConfig(none, "ClaimSize=ten"); err == nil {
			t.Fatal("no error")
		}
	})
}

func TestToggle(t *testing.T) {
	t.Parallel()
	// Every activation of a run changes its rule: the k-th touch of a rule
	// alternates activate, deactivate, starting from inactive.
	state := map[int]bool{}
	for k := range 3 * latencyRules {
		r, active := toggle(k)
		if state[r] == active {
			t.Fatalf("k=%d: rule %d already %v", k, r, active)
		}
		state[r] = active
	}
}

func TestMD5UUIDMatchesSQL(t *testing.T) {
	t.Parallel()
	// md5('org' || 0)::uuid in PostgreSQL is the hex digest read as a UUID.
	if got, want := orgID(0).String(), "c039c6aa-6df7-0353-d7f9-99e97eb6a0a2"; got != want {
		t.Fatalf("orgID(0) = %s, want %s", got, want)
	}
}

func TestLoopbackOnly(t *testing.T) {
	t.Parallel()
	for url, ok := range map[string]bool{
		"postgres://postgres@127.0.0.1:5432/postgres": true,
		"postgres://postgres@localhost/postgres":      true,
		"postgres://postgres@db.example.com/postgres": false,
		"postgres://postgres@10.0.0.5/postgres":       false,
	} {
		if err := loopbackOnly(url); (err == nil) != ok {
			t.Errorf("loopbackOnly(%s) = %v", url, err)
		}
	}
}

func TestOffer(t *testing.T) {
	t.Parallel()
	t.Run("every slot is sent once, and it stops by itself", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		seen := map[int]int{}
		gen, err := offer(context.Background(), 1000, 200*time.Millisecond, 4, func(_ context.Context, k int) error {
			mu.Lock()
			seen[k]++
			mu.Unlock()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(seen) != 200 || gen.late != 0 || gen.failed != 0 {
			t.Fatalf("sent %d distinct slots, late %d, failed %d; want 200, 0, 0", len(seen), gen.late, gen.failed)
		}
		for k, n := range seen {
			if n != 1 {
				t.Fatalf("slot %d sent %d times", k, n)
			}
		}
	})
	t.Run("failed sends are counted and the load goes on", func(t *testing.T) {
		t.Parallel()
		gen, err := offer(context.Background(), 1000, 50*time.Millisecond, 2, func(context.Context, int) error {
			return errors.New("boom")
		})
		if err != nil {
			t.Fatal(err)
		}
		if gen.failed != 50 || gen.firstErr != "boom" {
			t.Fatalf("failed %d (first %q), want 50 (boom)", gen.failed, gen.firstErr)
		}
	})
	t.Run("sends that cannot start on time are skipped, not queued", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		gen, err := offer(context.Background(), 100, 500*time.Millisecond, 1, func(ctx context.Context, _ int) error {
			time.Sleep(300 * time.Millisecond)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if gen.late == 0 {
			t.Fatal("no send counted late with one sender far slower than the rate")
		}
		if took := time.Since(start); took > 3*time.Second {
			t.Fatalf("offer ran %s for a 500ms load", took)
		}
	})
}

func TestPairUnit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name          string
		claim, settle int
		unit          int
		claims        []int
	}{
		{"claim size 10 makes 10 full claims a settle", 10, 100, 100, []int{10, 10, 10, 10, 10, 10, 10, 10, 10, 10}},
		{"claim size 40 takes the common multiple, 5 claims and 2 settles", 40, 100, 200, []int{40, 40, 40, 40, 40}},
		{"a multiple over the bound is one settle, the last claim smaller", 64, 100, 100, []int{64, 36}},
		{"a claim of the settle's size is one claim", 100, 100, 100, []int{100}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			unit, claims := pairUnit(tc.claim, tc.settle)
			if unit != tc.unit || fmt.Sprint(claims) != fmt.Sprint(tc.claims) {
				t.Fatalf("pairUnit(%d, %d) = %d, %v; want %d, %v", tc.claim, tc.settle, unit, claims, tc.unit, tc.claims)
			}
		})
	}
}

func TestSubstitute(t *testing.T) {
	t.Parallel()
	t.Run("$10 is the tenth argument, not $1 then 0", func(t *testing.T) {
		t.Parallel()
		exprs := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "J"}
		got, err := substitute("$1 $10 $2::int", exprs)
		if err != nil || got != "a J b::int" {
			t.Fatalf("got %q, %v", got, err)
		}
	})
	t.Run("a parameter beyond the arguments is an error", func(t *testing.T) {
		t.Parallel()
		if _, err := substitute("$1 $3", []string{"a", "b"}); err == nil {
			t.Fatal("no error")
		}
	})
}

func TestClaimParams(t *testing.T) {
	t.Parallel()
	at := int64(1_800_000_000_000)
	token := uuid.New()
	t.Run("times, floor, limit, token and constants each get their own form", func(t *testing.T) {
		t.Parallel()
		// The relay's claim: now, now + lease, lease, limit, floor, max attempts, token.
		exprs, vars, err := claimParams([]any{at + 3, at + 3 + 300_000, int64(300_000), 7, int64(0), 10, token}, at, 7)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"(" + clockMs + " + 0)", "(" + clockMs + " + 300000)", ":c3", "{LIMIT}", ":floor", ":c6", "{TOKEN}"}
		if fmt.Sprint(exprs) != fmt.Sprint(want) {
			t.Fatalf("exprs = %v\nwant    %v", exprs, want)
		}
		if fmt.Sprint(vars) != fmt.Sprint([]string{`\set c3 300000`, `\set c6 10`}) {
			t.Fatalf("vars = %v", vars)
		}
	})
	t.Run("a limit written into the statement is no error here", func(t *testing.T) {
		t.Parallel()
		if _, _, err := claimParams([]any{at, int64(0), token}, at, 7); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("two arguments equal to the limit are ambiguous", func(t *testing.T) {
		t.Parallel()
		if _, _, err := claimParams([]any{at, 7, 7, token}, at, 7); err == nil {
			t.Fatal("no error")
		}
	})
	t.Run("an argument of an unknown type is an error naming it", func(t *testing.T) {
		t.Parallel()
		_, _, err := claimParams([]any{at, 1.5, token}, at, 7)
		if err == nil || !strings.Contains(err.Error(), "$2") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("a string (the lane's subscriber) is a literal", func(t *testing.T) {
		t.Parallel()
		exprs, _, err := claimParams([]any{at, "it's", token}, at, 7)
		if err != nil || len(exprs) != 3 || exprs[1] != "'it''s'::text" {
			t.Fatalf("exprs = %v, err = %v", exprs, err)
		}
	})
	t.Run("no token is an error", func(t *testing.T) {
		t.Parallel()
		if _, _, err := claimParams([]any{at, 7}, at, 7); err == nil {
			t.Fatal("no error")
		}
	})
}

func TestSettleParams(t *testing.T) {
	t.Parallel()
	at := int64(1_800_000_000_000)
	tok := uuid.New()
	ids := []uuid.UUID{uuid.New(), uuid.New(), uuid.New()}
	exprs, err := settleParams([]any{ids, []uuid.UUID{tok, tok, tok}, []string{"processed", "processed", "processed"},
		[]int64{at + 5, at + 6, at + 9}, []*string{nil, nil, nil}}, at)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"{IDS}", "{TOKENS}", "array_fill('processed'::text, ARRAY[{N}])",
		"array_fill(" + clockMs + "::bigint, ARRAY[{N}])", "array_fill(NULL::text, ARRAY[{N}])"}
	if fmt.Sprint(exprs) != fmt.Sprint(want) {
		t.Fatalf("exprs = %v\nwant    %v", exprs, want)
	}
	if _, err := settleParams([]any{[]string{"processed", "retry"}}, at); err == nil {
		t.Fatal("outcomes of different kinds: no error")
	}
}

func TestPairScriptText(t *testing.T) {
	t.Parallel()
	at := int64(1_800_000_000_000)
	tok := uuid.New()
	settle := capturedSQL{sql: "UPDATE outbox_events SET x = 1 FROM unnest($1::uuid[], $2::uuid[]) AS u(id, token) WHERE id = u.id", args: []any{
		[]uuid.UUID{uuid.New(), uuid.New()}, []uuid.UUID{tok, tok}}}
	t.Run("a limit parameter stays a parameter, one per claim", func(t *testing.T) {
		t.Parallel()
		p := pairSQL{claim: capturedSQL{sql: "SELECT $1 LIMIT $2::int $3", args: []any{at, 7, tok}}, settle: settle, at: at, limit: 7}
		script, unit, err := pairScript(p, 10, "BEGIN;\nEND;\n")
		if err != nil {
			t.Fatal(err)
		}
		if unit != 100 || strings.Count(script, "LIMIT :lim") != 10 || strings.Count(script, "BEGIN;") != 100 || strings.Count(script, "UPDATE outbox_events") != 1 {
			t.Fatalf("unit %d, script:\n%s", unit, script)
		}
	})
	t.Run("a literal limit stays a literal of each claim's size", func(t *testing.T) {
		t.Parallel()
		p := pairSQL{claim: capturedSQL{sql: "SELECT $1 LIMIT 7 $2", args: []any{at, tok}}, settle: settle, at: at, limit: 7}
		script, _, err := pairScript(p, 64, "BEGIN;\nEND;\n")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(script, "LIMIT 64 ") != 1 || strings.Count(script, "LIMIT 36 ") != 1 {
			t.Fatalf("script:\n%s", script)
		}
	})
	t.Run("a claim and a settle the relay commits asynchronously run so, billing's transactions not", func(t *testing.T) {
		t.Parallel()
		claim := capturedSQL{sql: "SELECT $1 LIMIT $2::int $3", args: []any{at, 7, tok}, async: true}
		asyncSettle := settle
		asyncSettle.async = true
		script, _, err := pairScript(pairSQL{claim: claim, settle: asyncSettle, at: at, limit: 7}, 50, "BEGIN;\nEND;\n")
		if err != nil {
			t.Fatal(err)
		}
		off, on, firstTxn, lastTxn := strings.Index(script, "SET synchronous_commit = off;"), strings.Index(script, "SET synchronous_commit = on;"),
			strings.Index(script, "BEGIN;"), strings.LastIndex(script, "END;")
		if strings.Count(script, "SET synchronous_commit = off;") != 2 || strings.Count(script, "SET synchronous_commit = on;") != 2 ||
			off > strings.Index(script, "LIMIT :lim0") || on > firstTxn || strings.LastIndex(script, "SET synchronous_commit = off;") < lastTxn {
			t.Fatalf("script:\n%s", script)
		}
	})
	t.Run("a synchronous relay's script sets nothing", func(t *testing.T) {
		t.Parallel()
		p := pairSQL{claim: capturedSQL{sql: "SELECT $1 LIMIT $2::int $3", args: []any{at, 7, tok}}, settle: settle, at: at, limit: 7}
		script, _, err := pairScript(p, 10, "BEGIN;\nEND;\n")
		if err != nil || strings.Contains(script, "synchronous_commit") {
			t.Fatalf("%v, script:\n%s", err, script)
		}
	})
	t.Run("a limit that is neither is an error", func(t *testing.T) {
		t.Parallel()
		p := pairSQL{claim: capturedSQL{sql: "SELECT $1 LIMIT 70 $2", args: []any{at, tok}}, settle: settle, at: at, limit: 7}
		if _, _, err := pairScript(p, 10, "BEGIN;\nEND;\n"); err == nil {
			t.Fatal("no error")
		}
	})
}

func TestWarmUp(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// Effects lag their commits by these, one item after the other: the first
	// waited for a poll (nobody listened yet), the second was woken.
	lags := []time.Duration{900 * time.Millisecond, 20 * time.Millisecond, time.Second}
	t.Run("it commits until an item takes effect at once, by the stamps", func(t *testing.T) {
		t.Parallel()
		i := -1
		n, err := warmUp(context.Background(),
			func() (time.Time, error) { i++; return t0, nil },
			func() (bool, error) { return true, nil },
			func() (time.Time, error) { return t0.Add(lags[i]), nil })
		if err != nil || n != 2 {
			t.Fatalf("warmUp = %d, %v; want 2 items, no error", n, err)
		}
	})
	t.Run("a system that never takes effect at once fails the run", func(t *testing.T) {
		t.Parallel()
		n, err := warmUp(context.Background(),
			func() (time.Time, error) { return t0, nil },
			func() (bool, error) { return true, nil },
			func() (time.Time, error) { return t0.Add(time.Second), nil })
		if err == nil || n != warmTries || !strings.Contains(err.Error(), "LISTEN") {
			t.Fatalf("warmUp = %d, %v; want %d items and an error naming the wake-up", n, err, warmTries)
		}
	})
}

package pgbench

import (
	"fmt"
	"strings"
	"testing"

	"github.com/google/uuid"
)

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

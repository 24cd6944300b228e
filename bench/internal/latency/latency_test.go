package latency

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"
)

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
	l := Outcome{applied: 90, gen: Offered{total: 100, late: 4, failed: 2}}
	if got := l.unapplied(); got != 10 {
		t.Fatalf("unapplied = %d, want 10 (100 offered, 90 applied: skipped, failed and missing alike)", got)
	}
}

func TestToggle(t *testing.T) {
	t.Parallel()
	// Every activation of a run changes its rule: the k-th touch of a rule
	// alternates activate, deactivate, starting from inactive.
	state := map[int]bool{}
	for k := range 3 * Rules {
		r, active := Toggle(k)
		if state[r] == active {
			t.Fatalf("k=%d: rule %d already %v", k, r, active)
		}
		state[r] = active
	}
}

func TestOffer(t *testing.T) {
	t.Parallel()
	t.Run("every slot is sent once, and it stops by itself", func(t *testing.T) {
		t.Parallel()
		var mu sync.Mutex
		seen := map[int]int{}
		gen, err := Offer(context.Background(), 1000, 200*time.Millisecond, 4, func(_ context.Context, k int) error {
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
		gen, err := Offer(context.Background(), 1000, 50*time.Millisecond, 2, func(context.Context, int) error {
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
		gen, err := Offer(context.Background(), 100, 500*time.Millisecond, 1, func(ctx context.Context, _ int) error {
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

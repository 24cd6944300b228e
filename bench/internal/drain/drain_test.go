package drain

import (
	"context"
	"strings"
	"testing"
	"time"
)

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

func TestWarmUp(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	// Effects lag their commits by these, one item after the other: the first
	// waited for a poll (nobody listened yet), the second was woken.
	lags := []time.Duration{900 * time.Millisecond, 20 * time.Millisecond, time.Second}
	t.Run("it commits until an item takes effect at once, by the stamps", func(t *testing.T) {
		t.Parallel()
		i := -1
		n, err := WarmUp(context.Background(),
			func() (time.Time, error) { i++; return t0, nil },
			func() (bool, error) { return true, nil },
			func() (time.Time, error) { return t0.Add(lags[i]), nil })
		if err != nil || n != 2 {
			t.Fatalf("WarmUp = %d, %v; want 2 items, no error", n, err)
		}
	})
	t.Run("a system that never takes effect at once fails the run", func(t *testing.T) {
		t.Parallel()
		n, err := WarmUp(context.Background(),
			func() (time.Time, error) { return t0, nil },
			func() (bool, error) { return true, nil },
			func() (time.Time, error) { return t0.Add(time.Second), nil })
		if err == nil || n != warmTries || !strings.Contains(err.Error(), "LISTEN") {
			t.Fatalf("WarmUp = %d, %v; want %d items and an error naming the wake-up", n, err, warmTries)
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

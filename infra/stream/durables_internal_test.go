package stream

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// gatedReads is a durableReads whose reads each wait for a release and
// report their number (1, 2, ...) as the error of durable "n".
type gatedReads struct {
	d       durableReads
	started chan int      // each read's number as it starts
	release chan struct{} // one value lets one read end
	reads   atomic.Int32
}

func newGatedReads() *gatedReads {
	g := &gatedReads{started: make(chan int, 100), release: make(chan struct{}, 100)}
	g.d.read = func(context.Context) map[string]durableRead {
		n := int(g.reads.Add(1))
		g.started <- n
		<-g.release
		return map[string]durableRead{"n": {err: fmt.Errorf("%d", n)}}
	}
	return g
}

func (g *gatedReads) waitStarted(t *testing.T, want int) {
	t.Helper()
	select {
	case n := <-g.started:
		require.Equal(t, want, n, "reads start one after another")
	case <-time.After(10 * time.Second):
		t.Fatalf("read %d did not start within 10s", want)
	}
}

// numberOf is the number of the read that answered got.
func numberOf(got map[string]durableRead) string { return got["n"].err.Error() }

func TestDurableReads(t *testing.T) {
	t.Parallel()
	t.Run("a call made while a read is under way is answered by the next read, never that one", func(t *testing.T) {
		t.Parallel()
		g := newGatedReads()
		first := make(chan string, 1)
		go func() {
			got, err := g.d.get(context.Background())
			if err != nil {
				first <- err.Error()
				return
			}
			first <- numberOf(got)
		}()
		g.waitStarted(t, 1)
		second := make(chan string, 1)
		go func() {
			got, err := g.d.get(context.Background())
			if err != nil {
				second <- err.Error()
				return
			}
			second <- numberOf(got)
		}()
		// The second call has joined the next read once get holds its round;
		// until read 1 ends, read 2 cannot start.
		require.Eventually(t, func() bool {
			g.d.mu.Lock()
			defer g.d.mu.Unlock()
			return g.d.next != nil
		}, 10*time.Second, time.Millisecond, "the second call joins the next read")
		g.release <- struct{}{}
		require.Equal(t, "1", <-first)
		g.waitStarted(t, 2)
		g.release <- struct{}{}
		require.Equal(t, "2", <-second)
	})
	t.Run("calls made during one read share the next, one read for all of them", func(t *testing.T) {
		t.Parallel()
		g := newGatedReads()
		var wg sync.WaitGroup
		answers := make(chan string, 41)
		call := func() {
			defer wg.Done()
			got, err := g.d.get(context.Background())
			if err != nil {
				answers <- err.Error()
				return
			}
			answers <- numberOf(got)
		}
		wg.Add(1)
		go call()
		g.waitStarted(t, 1)
		for range 40 {
			wg.Add(1)
			go call()
		}
		require.Eventually(t, func() bool {
			g.d.mu.Lock()
			defer g.d.mu.Unlock()
			return g.d.next != nil && g.d.next.calls == 40
		}, 10*time.Second, time.Millisecond, "every later call joins the next read")
		// Let every read end: the one under way, then the one all 40 joined.
		g.release <- struct{}{}
		g.release <- struct{}{}
		wg.Wait()
		close(answers)
		count := map[string]int{}
		for a := range answers {
			count[a]++
		}
		require.Equal(t, map[string]int{"1": 1, "2": 40}, count,
			"the first call alone got the read under way, every later one read 2")
		require.EqualValues(t, 2, g.reads.Load(), "two reads answered 41 calls")
	})
	t.Run("a call whose context ends returns its error and leaves the reads going", func(t *testing.T) {
		t.Parallel()
		g := newGatedReads()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := g.d.get(ctx)
			done <- err
		}()
		g.waitStarted(t, 1)
		cancel()
		require.ErrorIs(t, <-done, context.Canceled)
		g.release <- struct{}{}
		// The next call starts a read of its own.
		next := make(chan string, 1)
		go func() {
			got, err := g.d.get(context.Background())
			if err != nil {
				next <- err.Error()
				return
			}
			next <- numberOf(got)
		}()
		g.waitStarted(t, 2)
		g.release <- struct{}{}
		require.Equal(t, "2", <-next)
	})
}

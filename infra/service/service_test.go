package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readyz starts a server answering /readyz with status and returns its HTTP_ADDR
// in the form a container sets it: no host, only the port.
func readyz(t *testing.T, status int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	return ":" + port
}

func TestHealthcheck(t *testing.T) {
	t.Parallel()

	t.Run("a ready server is healthy", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, Healthcheck(readyz(t, http.StatusOK)))
	})

	t.Run("a server answering 503 is unhealthy", func(t *testing.T) {
		t.Parallel()
		err := Healthcheck(readyz(t, http.StatusServiceUnavailable))
		require.ErrorContains(t, err, "503")
	})

	t.Run("an explicit host is used as given", func(t *testing.T) {
		t.Parallel()
		addr := readyz(t, http.StatusOK)
		require.NoError(t, Healthcheck("127.0.0.1"+addr))
	})

	t.Run("nothing listening is unhealthy", func(t *testing.T) {
		t.Parallel()
		// Take a free port, then close it so nothing listens there.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		require.Error(t, Healthcheck(addr))
	})

	t.Run("an address without a port is an error naming HTTP_ADDR", func(t *testing.T) {
		t.Parallel()
		require.ErrorContains(t, Healthcheck("localhost"), "HTTP_ADDR")
	})
}

func TestWithin(t *testing.T) {
	t.Parallel()

	t.Run("a stop that ignores its context is left behind at the end of its share, with an error", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		// Ignores ctx; gives up by itself after a while, so a Within that waits
		// for it fails the test rather than hanging it.
		stuck := func(context.Context) error {
			select {
			case <-release:
			case <-time.After(3 * time.Second):
			}
			return nil
		}

		start := time.Now()
		err := Within(50*time.Millisecond, stuck)(context.Background())
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.ErrorContains(t, err, "50ms")
		require.Less(t, time.Since(start), 2*time.Second, "returned at its share, not when the stop did")
	})

	t.Run("the caller's earlier deadline wins over the share", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		start := time.Now()
		err := Within(time.Minute, func(context.Context) error {
			select {
			case <-release:
			case <-time.After(3 * time.Second):
			}
			return nil
		})(ctx)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Less(t, time.Since(start), 2*time.Second)
	})

	t.Run("a stop that returns in time gives its own answer", func(t *testing.T) {
		t.Parallel()
		want := errors.New("flush failed")
		require.ErrorIs(t, Within(time.Minute, func(context.Context) error { return want })(context.Background()), want)
		require.NoError(t, Within(time.Minute, func(context.Context) error { return nil })(context.Background()))
	})

	t.Run("a stop that honours its context returns its own error at the deadline", func(t *testing.T) {
		t.Parallel()
		err := Within(20*time.Millisecond, func(ctx context.Context) error {
			<-ctx.Done()
			return fmt.Errorf("relay: %w", ctx.Err())
		})(context.Background())
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

func TestWithinGivesUpCleanly(t *testing.T) {
	t.Parallel()

	t.Run("a stop that gives up cleanly at its context's end is not reported as overrunning", func(t *testing.T) {
		t.Parallel()
		// A share of a second keeps the full slack (withinSlack), as every real
		// share has: with a share of 30ms the slack was 3ms, less than a busy
		// machine takes to wake the stop's goroutine.
		for range 3 {
			err := Within(time.Second, func(ctx context.Context) error {
				<-ctx.Done()
				return nil // nothing lost by giving up, as the pool's close
			})(context.Background())
			require.NoError(t, err)
		}
	})
}

func TestLoopback(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "127.0.0.2:1": true, "[::1]:8080": true, "localhost:8080": true,
		":8080": false, "0.0.0.0:8080": false, "[::]:8080": false, "10.0.0.1:8080": false, "example.com:80": false, "nonsense": false,
	} {
		require.Equal(t, want, Loopback(addr), addr)
	}
}

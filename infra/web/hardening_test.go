package web_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/web"
)

// syncLog is a log sink safe for the server's goroutines.
type syncLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// lines decodes every log line, failing t on one that is not a JSON object.
func (l *syncLog) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m), "log line %q", line)
		out = append(out, m)
	}
	return out
}

// started is a real web.Server on a free port over web.New's echo.
type started struct {
	e    *echo.Echo
	s    *web.Server
	log  *syncLog
	base string
}

func start(t *testing.T, register func(e *echo.Echo)) started {
	t.Helper()
	log := &syncLog{}
	logger := slog.New(slog.NewJSONHandler(log, nil))
	e := web.New(logger, pinger{})
	register(e)
	s := web.NewServer(web.Config{Addr: "127.0.0.1:0"}, e, logger)
	require.NoError(t, s.Start(context.Background()))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return started{e: e, s: s, log: log, base: "http://" + s.Addr()}
}

// rawRequest writes req on conn and reads one response.
func rawRequest(t *testing.T, conn net.Conn, req string) *http.Response {
	t.Helper()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err := io.WriteString(conn, req)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	return resp
}

func TestServerStop(t *testing.T) {
	t.Parallel()

	t.Run("stop refuses new connections at once, drops late requests and drains the one in flight", func(t *testing.T) {
		t.Parallel()
		entered, release := make(chan struct{}), make(chan struct{})
		var committed atomic.Bool
		srv := start(t, func(e *echo.Echo) {
			e.GET("/slow", func(c echo.Context) error {
				close(entered)
				<-release
				return c.String(http.StatusOK, "done")
			})
			e.POST("/commit", func(c echo.Context) error {
				committed.Store(true)
				return c.NoContent(http.StatusNoContent)
			})
		})
		inflight := make(chan int, 1)
		go func() {
			resp, err := http.Get(srv.base + "/slow")
			if err != nil {
				inflight <- 0
				return
			}
			resp.Body.Close()
			inflight <- resp.StatusCode
		}()
		<-entered
		// A connection accepted before the stop whose request comes after it.
		late, err := net.Dial("tcp", srv.s.Addr())
		require.NoError(t, err)
		defer late.Close()

		stopped := make(chan error, 1)
		go func() { stopped <- srv.s.Stop(context.Background()) }()

		require.Eventually(t, func() bool {
			c, err := net.DialTimeout("tcp", srv.s.Addr(), time.Second)
			if err == nil {
				c.Close()
			}
			return err != nil
		}, 5*time.Second, 10*time.Millisecond, "new connections are refused while a request is in flight")
		require.NoError(t, late.SetDeadline(time.Now().Add(10*time.Second)))
		// A connection still in the listen backlog when the listener closed is reset
		// (the write or the read fails): that refuses the late request too.
		if _, err = io.WriteString(late, "POST /commit HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"); err == nil {
			if resp, err := http.ReadResponse(bufio.NewReader(late), nil); err == nil {
				resp.Body.Close()
				require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "a late request is refused, if answered at all")
			}
		}
		require.False(t, committed.Load(), "a request that arrives after the stop began never runs")

		close(release)
		require.Equal(t, http.StatusOK, <-inflight, "the request in flight is answered")
		require.NoError(t, <-stopped)
	})

	t.Run("once stopping, readyz and the API answer 503 with Connection: close; healthz still 200", func(t *testing.T) {
		t.Parallel()
		srv := start(t, func(e *echo.Echo) {
			e.POST("/commit", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
		})
		require.NoError(t, srv.s.Stop(context.Background()))
		for path, want := range map[string]int{"/readyz": 503, "/commit": 503, "/healthz": 200} {
			method := http.MethodGet
			if path == "/commit" {
				method = http.MethodPost
			}
			rec := httptest.NewRecorder()
			srv.s.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
			require.Equal(t, want, rec.Code, path)
			if want == 503 {
				require.Equal(t, "close", rec.Header().Get("Connection"))
				require.Equal(t, "unavailable", errorBody(t, rec).Error.Code)
			}
		}
	})

	t.Run("every request gets the configured deadline", func(t *testing.T) {
		t.Parallel()
		e := echo.New()
		var left time.Duration
		e.GET("/x", func(c echo.Context) error {
			deadline, ok := c.Request().Context().Deadline()
			require.True(t, ok)
			left = time.Until(deadline)
			return c.NoContent(http.StatusNoContent)
		})
		s := web.NewServer(web.Config{Addr: "127.0.0.1:0", RequestTimeout: 3 * time.Second}, e, slog.New(slog.DiscardHandler))
		s.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/x", nil))
		require.InDelta(t, 3*time.Second, left, float64(time.Second))
		require.Equal(t, 5*time.Second, s.DrainTimeout(), "the drain outlasts the longest request")
	})
}

func TestHostileMethods(t *testing.T) {
	t.Parallel()
	srv := start(t, func(*echo.Echo) {})
	const letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	for i := range 60 {
		method := make([]byte, 10_000+rand.IntN(20_000))
		for j := range method {
			method[j] = letters[rand.IntN(len(letters))]
		}
		conn, err := net.Dial("tcp", srv.s.Addr())
		require.NoError(t, err)
		resp := rawRequest(t, conn, fmt.Sprintf("%s /v1/x%d HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", method, i))
		resp.Body.Close()
		conn.Close()
		require.Less(t, resp.StatusCode, 500)
	}

	resp, err := http.Get(srv.base + "/metrics")
	require.NoError(t, err)
	metrics, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Less(t, len(metrics), 64<<10, "60 methods of 10-30 KB create no series of their own")
	require.Contains(t, string(metrics), `method="other",route="unmatched"`)
	require.NotContains(t, string(metrics), "/v1/x", "a raw path is never a label")
	for _, line := range strings.Split(srv.log.String(), "\n") {
		require.Less(t, len(line), 1000, "a log line never repeats the method")
	}
}

func TestPanics(t *testing.T) {
	t.Parallel()
	srv := start(t, func(e *echo.Echo) {
		e.GET("/panic", func(echo.Context) error { panic("secret-value-in-panic") })
		e.GET("/twice", func(c echo.Context) error {
			c.Response().Writer.WriteHeader(http.StatusOK)
			c.Response().Writer.WriteHeader(http.StatusTeapot) // net/http complains through ErrorLog
			return nil
		})
	})

	t.Run("a panicking handler is answered 500 with the generic body, logged as JSON with its stack, and counted", func(t *testing.T) {
		resp, err := http.Get(srv.base + "/panic")
		require.NoError(t, err, "the connection is not dropped")
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusInternalServerError, resp.StatusCode)
		require.JSONEq(t, `{"error":{"code":"internal","message":"internal error"}}`, string(body))

		var logged map[string]any
		for _, line := range srv.log.lines(t) {
			if line["msg"] == "handler panicked" {
				logged = line
			}
		}
		require.NotNil(t, logged, srv.log.String())
		require.Equal(t, "ERROR", logged["level"])
		require.Equal(t, "/panic", logged["route"])
		require.Contains(t, logged["panic"], "secret-value-in-panic")
		require.Contains(t, logged["stack"], "goroutine", "the stack is a field of the one line")

		resp, err = http.Get(srv.base + "/metrics")
		require.NoError(t, err)
		metrics, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Contains(t, string(metrics), "http_handler_panics_total 1")
		require.Contains(t, string(metrics), `http_requests_total{code="500",method="GET",route="/panic"} 1`)
	})

	t.Run("the server's own error log is JSON through slog", func(t *testing.T) {
		resp, err := http.Get(srv.base + "/twice")
		require.NoError(t, err)
		resp.Body.Close()
		require.Eventually(t, func() bool { return strings.Contains(srv.log.String(), "superfluous") },
			5*time.Second, 10*time.Millisecond)
		srv.log.lines(t) // every line is JSON
	})
}

func TestClientGone(t *testing.T) {
	t.Parallel()

	for name, err := range map[string]error{
		"classified internal (labeling)":    fault.Wrap(fault.Internal, context.Canceled, "internal error"),
		"classified unavailable (billing)":  fault.Wrap(fault.Unavailable, fmt.Errorf("apply: %w", context.Canceled), "request ended"),
		"left unclassified by the use case": fmt.Errorf("query: %w", context.Canceled),
	} {
		t.Run("a cancelled request "+name+" is a 499 and no error log", func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			b.e.GET("/x", func(echo.Context) error { return err })
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/x", nil)
			rec := httptest.NewRecorder()
			b.e.ServeHTTP(rec, req)
			require.Equal(t, web.StatusClientClosed, rec.Code)
			require.NotContains(t, b.log.String(), `"level":"ERROR"`)
			require.NotContains(t, b.log.String(), `"level":"WARN"`)
		})
	}
}

func TestDecodeErrorsEchoNoInternals(t *testing.T) {
	t.Parallel()
	handler := func(c echo.Context) error {
		var v struct{}
		if err := web.DecodeJSON(c, &v); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	}

	t.Run("a read error answers a fixed message", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.e.POST("/x", handler)
		req := httptest.NewRequest(http.MethodPost, "/x",
			iotest.ErrReader(errors.New("read tcp 10.0.0.7:8080->10.0.0.9:41234: i/o timeout")))
		rec := httptest.NewRecorder()
		b.e.ServeHTTP(rec, req)
		require.Equal(t, http.StatusBadRequest, rec.Code)
		require.Equal(t, "body could not be read", errorBody(t, rec).Error.Message)
	})

	t.Run("an unknown field's name is clipped", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.e.POST("/x", handler)
		rec := serve(b.e, http.MethodPost, "/x", `{"`+strings.Repeat("f", 10_000)+`":1}`)
		require.Equal(t, http.StatusBadRequest, rec.Code)
		require.Less(t, len(errorBody(t, rec).Error.Message), 200)
	})
}

package web

import (
	"fmt"
	"log/slog"
	"net/http"
	"runtime/debug"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/outboxpair/infra/fault"
)

var (
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "http_requests_total",
		Help: "HTTP requests answered, by route template, method and status code.",
	}, []string{"route", "method", "code"})
	latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "http_request_duration_seconds",
		Help:    "Time to answer an HTTP request, by route template.",
		Buckets: prometheus.DefBuckets,
	}, []string{"route"})
	panics = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "http_handler_panics_total",
		Help: "Handler panics recovered into a 500; each is a defect.",
	})
)

func init() { prometheus.MustRegister(requests, latency, panics) }

// knownMethods are the methods a metric label or a log line names; every other
// token a client sends as a method is "other", so no request creates a series.
var knownMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true,
	http.MethodPatch: true, http.MethodDelete: true, http.MethodOptions: true,
	http.MethodConnect: true, http.MethodTrace: true,
}

// MethodLabel is method if it is a standard HTTP method, else "other".
func MethodLabel(method string) string {
	if knownMethods[method] {
		return method
	}
	return "other"
}

// routeLabel is the matched route template, or "unmatched": never the raw path.
func routeLabel(c echo.Context) string {
	if r := c.Path(); r != "" {
		return r
	}
	return "unmatched"
}

// observe counts, times and logs every request by its route template and
// method label (never the raw path or method), after the error handler has
// answered, so the status it records is the one the client got.
func observe(logger *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := recovering(next, c)
			if err != nil {
				c.Error(err) // write the error response now, so the status below is final
			}
			route, method := routeLabel(c), MethodLabel(c.Request().Method)
			status := c.Response().Status
			requests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
			latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
			if route != "/metrics" && route != "/healthz" && route != "/readyz" {
				logger.InfoContext(c.Request().Context(), "request", "method", method, "route", route,
					"status", status, "duration_ms", time.Since(start).Milliseconds())
			}
			return nil
		}
	}
}

// panicError is a recovered handler panic: an Internal error whose value and
// stack the error handler logs as fields of one JSON line.
type panicError struct {
	value any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("handler panicked: %v", p.value) }

// recovering runs next and turns a panic into an Internal error, so a panicking
// handler is answered 500, counted and logged like any defect instead of dropping
// the connection and writing a stack to stderr. http.ErrAbortHandler is the
// standard library's way to abort a response on purpose and is left to it.
func recovering(next echo.HandlerFunc, c echo.Context) (err error) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		if v == http.ErrAbortHandler { //nolint:errorlint // compared as the sentinel panic value, as net/http does
			panic(v)
		}
		panics.Inc()
		err = &fault.Error{Code: fault.Internal, Message: "internal error", Err: &panicError{value: v, stack: debug.Stack()}}
	}()
	return next(c)
}

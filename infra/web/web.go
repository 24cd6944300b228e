// Package web is the HTTP layer both services share: an echo instance with the one
// error handler that maps fault codes to statuses, strict JSON decoding, request
// metrics and logs, the health, readiness and metrics endpoints, and a server that
// listens in fx's OnStart (a taken port fails start-up) and drains in OnStop.
package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/fault"
)

// MaxBody is the largest request body DecodeJSON reads; more is a 413.
const MaxBody = 64 << 10

// Module provides the echo instance and the server that runs it.
var Module = fx.Module("web",
	fx.Provide(New, NewServer),
	fx.Invoke(func(lc fx.Lifecycle, s *Server) {
		lc.Append(fx.Hook{OnStart: s.Start, OnStop: s.Stop})
	}),
)

// Config is what the server needs from the service's configuration.
type Config struct {
	Addr string
}

// Pinger answers whether the database is reachable; *pgxpool.Pool fits.
type Pinger interface {
	Ping(ctx context.Context) error
}

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
)

func init() { prometheus.MustRegister(requests, latency) }

// New returns an echo instance with the error handler, request metrics and
// logging, and /healthz, /readyz (a ping of db) and /metrics.
func New(logger *slog.Logger, db Pinger) *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = ErrorHandler(logger)
	e.Use(observe(logger))

	e.GET("/healthz", func(c echo.Context) error { return c.NoContent(http.StatusOK) })
	e.GET("/readyz", func(c echo.Context) error {
		ctx, cancel := context.WithTimeout(c.Request().Context(), 2*time.Second)
		defer cancel()
		if err := db.Ping(ctx); err != nil {
			return fault.Wrap(fault.Unavailable, err, "database unavailable")
		}
		return c.NoContent(http.StatusOK)
	})
	e.GET("/metrics", echo.WrapHandler(promhttp.Handler()))
	return e
}

// statuses is the one table from error code to HTTP status.
var statuses = map[fault.Code]int{
	fault.Invalid:        http.StatusBadRequest,
	fault.Unauthorized:   http.StatusUnauthorized,
	fault.NotFound:       http.StatusNotFound,
	fault.Conflict:       http.StatusConflict,
	fault.TooLarge:       http.StatusRequestEntityTooLarge,
	fault.NotImplemented: http.StatusNotImplemented,
	fault.Unavailable:    http.StatusServiceUnavailable,
	fault.Internal:       http.StatusInternalServerError,
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// ErrorHandler answers err with the status of its code and an ErrorBody. Internal
// and Unavailable errors are logged with their cause and answered with a generic
// message; nothing else is logged.
func ErrorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		fe := asFault(err)
		status := statuses[fe.Code]
		if status == 0 {
			status = http.StatusInternalServerError
		}
		var body ErrorBody
		body.Error.Code = string(fe.Code)
		if fe.Reason != "" {
			body.Error.Code = fe.Reason
		}
		body.Error.Message = fe.Message
		switch fe.Code {
		case fault.Internal:
			logger.Error("request failed", "method", c.Request().Method, "route", c.Path(), "error", err)
			body.Error.Message = "internal error"
		case fault.Unavailable:
			logger.Warn("request failed: dependency unavailable", "method", c.Request().Method, "route", c.Path(), "error", err)
			body.Error.Message = "service unavailable, retry later"
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(status)
			return
		}
		_ = c.JSON(status, body)
	}
}

func asFault(err error) *fault.Error {
	var fe *fault.Error
	if errors.As(err, &fe) {
		return fe
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg := http.StatusText(he.Code)
		switch {
		case he.Code == http.StatusNotFound:
			return &fault.Error{Code: fault.NotFound, Message: "no such route"}
		case he.Code == http.StatusMethodNotAllowed:
			return &fault.Error{Code: fault.Invalid, Reason: "method_not_allowed", Message: msg}
		case he.Code == http.StatusRequestEntityTooLarge:
			return &fault.Error{Code: fault.TooLarge, Message: msg}
		case he.Code == http.StatusUnauthorized:
			return &fault.Error{Code: fault.Unauthorized, Message: msg}
		case he.Code >= 400 && he.Code < 500:
			return &fault.Error{Code: fault.Invalid, Message: msg}
		}
	}
	return &fault.Error{Code: fault.Internal, Message: "internal error", Err: err}
}

// DecodeJSON decodes the request body into v strictly: one JSON value, no unknown
// fields, at most MaxBody bytes. Every failure is an Invalid or TooLarge *fault.Error.
func DecodeJSON(c echo.Context, v any) error {
	body := http.MaxBytesReader(c.Response(), c.Request().Body, MaxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return decodeError(err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		if err == nil {
			return fault.Errorf(fault.Invalid, "body must hold a single JSON value")
		}
		return decodeError(err)
	}
	return nil
}

func decodeError(err error) error {
	var tooLarge *http.MaxBytesError
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &tooLarge):
		return fault.Errorf(fault.TooLarge, "body is larger than %d bytes", tooLarge.Limit)
	case errors.Is(err, io.EOF):
		return fault.Errorf(fault.Invalid, "body is empty")
	case errors.As(err, &syntax), errors.Is(err, io.ErrUnexpectedEOF):
		return fault.Errorf(fault.Invalid, "body is not valid JSON")
	case errors.As(err, &typ):
		return fault.Errorf(fault.Invalid, "field %q must be a %s", typ.Field, typ.Type)
	default:
		// encoding/json reports unknown fields as `json: unknown field "x"`.
		return fault.Errorf(fault.Invalid, "body: %s", trimJSONPrefix(err.Error()))
	}
}

func trimJSONPrefix(s string) string {
	const p = "json: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

func observe(logger *slog.Logger) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			start := time.Now()
			err := next(c)
			if err != nil {
				c.Error(err) // write the error response now, so the status below is final
			}
			route := c.Path()
			if route == "" {
				route = "unmatched"
			}
			status := c.Response().Status
			requests.WithLabelValues(route, c.Request().Method, strconv.Itoa(status)).Inc()
			latency.WithLabelValues(route).Observe(time.Since(start).Seconds())
			if route != "/metrics" && route != "/healthz" && route != "/readyz" {
				logger.Info("request", "method", c.Request().Method, "route", route,
					"status", status, "duration_ms", time.Since(start).Milliseconds())
			}
			return nil
		}
	}
}

// Server runs an http.Server for the echo instance.
type Server struct {
	srv    *http.Server
	addr   string
	ln     net.Listener
	logger *slog.Logger
	done   chan struct{}
}

// NewServer returns a server for e on cfg.Addr; it listens only when started.
func NewServer(cfg Config, e *echo.Echo, logger *slog.Logger) *Server {
	return &Server{
		addr:   cfg.Addr,
		logger: logger,
		srv: &http.Server{
			Handler:           e,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			WriteTimeout:      60 * time.Second,
			IdleTimeout:       2 * time.Minute,
		},
	}
}

// Start listens on the configured address, so that a taken port fails start-up,
// then serves in the background.
func (s *Server) Start(context.Context) error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("HTTP_ADDR: listen on %s: %w", s.addr, err)
	}
	s.ln = ln
	s.done = make(chan struct{})
	s.logger.Info("http listening", "addr", ln.Addr().String())
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("http server stopped", "error", err)
		}
	}()
	return nil
}

// Addr is the address the server listens on, once started.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Stop stops accepting, lets in-flight requests finish until ctx ends, then closes
// what is left.
func (s *Server) Stop(ctx context.Context) error {
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
	}
	<-s.done
	return err
}

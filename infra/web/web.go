// Package web is the HTTP layer both services share: an echo instance with the one
// error handler that maps fault codes to statuses, request bodies bounded before
// any route reads them (Bodies), strict JSON decoding, request
// metrics and logs whose labels come from fixed sets, panic recovery, the health,
// readiness and metrics endpoints, and a server that listens in Start (a taken port
// fails start-up) and, in Stop, refuses new work at once and drains what is in
// flight. The service package orders Start and Stop in the app's lifecycle.
package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"reflect"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/telemetry"
)

// MaxBody is the largest request body any route reads (Bodies bounds every
// one; DecodeJSON reads at most this much); more is a 413.
const MaxBody = 64 << 10

// StopStep names the server's share of the stop budget: its DrainTimeout,
// declared by Module. service.Run bounds the server's stop by it; the
// authentication's key refresh (infra/auth) stops within what the drain left.
const StopStep = "http"

// Module provides the echo instance (traced when the app's *telemetry.Provider
// is on) and the server that runs it, and declares the server's share of the
// stop budget (StopStep, its DrainTimeout). It does not put the server in the
// lifecycle: service.Run does, last, so that the server starts after
// everything it serves and stops first.
var Module = fx.Module("web",
	fx.Provide(
		func(logger *slog.Logger, db Pinger, tp *telemetry.Provider) *echo.Echo {
			return New(logger, db, Traced(tp.On()))
		},
		NewServer,
	),
	stopbudget.Declare(StopStep, (*Server).DrainTimeout),
)

// Option changes what New builds.
type Option func(*options)

type options struct{ traced bool }

// Traced makes New trace every request (telemetry.Middleware) when on: the
// app passes its *telemetry.Provider's On, so nothing reads the global
// provider at construction. Off, or without it, a request costs nothing more.
func Traced(on bool) Option { return func(o *options) { o.traced = on } }

// DefaultRequestTimeout bounds a request when Config.RequestTimeout is 0
// (HTTP_REQUEST_TIMEOUT's default).
const DefaultRequestTimeout = 8 * time.Second

// MaxRequestTimeout is the longest RequestTimeout Validate accepts: it keeps
// the stop budget under an orchestrator's 30 s (service.StopGrace), since the
// drain's share is the request timeout plus 2 s and the other shares take
// 12 s, so 15 s makes a 29 s stop.
const MaxRequestTimeout = 15 * time.Second

// drainSlack is what a drain allows beyond the request timeout: writing the answer
// of a request that used all of its time.
const drainSlack = 2 * time.Second

// Config is what the server needs from the service's configuration.
type Config struct {
	Addr string
	// SecureCookies says browsers reach the service over HTTPS although it
	// serves plain HTTP (a TLS-terminating proxy in front): every request is
	// then Secure (see Secure), so the cookies the console sets carry the
	// Secure attribute. A request that arrived over TLS is Secure either way.
	SecureCookies bool
	// RequestTimeout is the deadline of every request's context (0 means
	// DefaultRequestTimeout): a request waiting on a lock or a slow database ends
	// with a 503 instead of holding its connection for ever.
	RequestTimeout time.Duration
}

// Validate reports a RequestTimeout out of its range (negative, or over
// MaxRequestTimeout) as "RequestTimeout: what is wrong".
func (c Config) Validate() error {
	switch {
	case c.RequestTimeout < 0:
		return fmt.Errorf("RequestTimeout: %s must not be negative", c.RequestTimeout)
	case c.RequestTimeout > MaxRequestTimeout:
		return fmt.Errorf("RequestTimeout: %s is more than the maximum of %s", c.RequestTimeout, MaxRequestTimeout)
	}
	return nil
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

// MaxEcho is the most characters of client input an error message or a log line
// repeats (the README's promise): every echo of client input goes through
// Clip(s, MaxEcho).
const MaxEcho = 64

// Clip returns s cut to at most n runes, with "…" when it was cut, so that an
// error message or a log line never repeats a client's whole input.
func Clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n {
			break
		}
		count++
	}
	return s[:i] + "…"
}

// New returns an echo instance with the error handler, request metrics and
// logging, and /healthz, /readyz (a ping of db) and /metrics; traced when
// opts say so (Traced).
func New(logger *slog.Logger, db Pinger, opts ...Option) *echo.Echo {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = ErrorHandler(logger)
	// Outside the request log, so that its line and the error handler's are
	// written inside the request's span. Only with tracing on (Traced), so
	// with it off a request costs nothing more, not even a closure.
	if o.traced {
		e.Use(telemetry.Middleware())
	}
	e.Use(observe(logger))
	e.Use(Bodies)

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
	fault.Invalid:              http.StatusBadRequest,
	fault.Unauthorized:         http.StatusUnauthorized,
	fault.NotFound:             http.StatusNotFound,
	fault.Conflict:             http.StatusConflict,
	fault.TooLarge:             http.StatusRequestEntityTooLarge,
	fault.UnsupportedMediaType: http.StatusUnsupportedMediaType,
	fault.NotImplemented:       http.StatusNotImplemented,
	fault.Unavailable:          http.StatusServiceUnavailable,
	fault.Internal:             http.StatusInternalServerError,
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// StatusClientClosed answers a request whose client went away before its answer
// (nginx's 499): not a server error, so it stays out of the 5xx alert.
const StatusClientClosed = 499

// ErrorHandler answers err with the status of its code and an ErrorBody. Internal
// and Unavailable errors are logged with their cause and answered with a generic
// message; nothing else is logged. A request whose client went away (its context
// cancelled) is answered 499 and not logged, whatever code the use case gave it:
// both services classify it here, the same way.
func ErrorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		method, route := MethodLabel(c.Request().Method), routeLabel(c)
		ctx := c.Request().Context()
		if errors.Is(err, context.Canceled) && errors.Is(c.Request().Context().Err(), context.Canceled) {
			var body ErrorBody
			body.Error.Code, body.Error.Message = "client_closed_request", "the client went away"
			_ = c.JSON(StatusClientClosed, body)
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
			var p *panicError
			if errors.As(err, &p) {
				logger.ErrorContext(ctx, "handler panicked", "method", method, "route", route,
					"panic", Clip(fmt.Sprint(p.value), 1000), "stack", string(p.stack))
			} else {
				logger.ErrorContext(ctx, "request failed", "method", method, "route", route, "error", err)
			}
			body.Error.Message = "internal error"
		case fault.Unavailable:
			logger.WarnContext(ctx, "request failed: dependency unavailable", "method", method, "route", route, "error", err)
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
		case he.Code == http.StatusUnsupportedMediaType:
			return &fault.Error{Code: fault.UnsupportedMediaType, Message: msg}
		case he.Code == http.StatusUnauthorized:
			return &fault.Error{Code: fault.Unauthorized, Message: msg}
		case he.Code >= 400 && he.Code < 500:
			return &fault.Error{Code: fault.Invalid, Message: msg}
		}
	}
	return &fault.Error{Code: fault.Internal, Message: "internal error", Err: err}
}

// DecodeJSON decodes the request body into v exactly as strictly as
// api/openapi.yaml says: a Content-Type of application/json (else 415), at most
// MaxBody bytes (else 413), one JSON value of v's shape whose member names match
// v's json tags exactly (another letter case is an unknown member), no member
// unknown to v and none given twice, in any object of the body, and strings that
// are valid UTF-8 and hold no NUL (U+0000). Every failure is an *fault.Error
// whose message names the member by its JSON pointer and the JSON kind it must
// be, never a Go type. A json.RawMessage field in v takes its value as sent,
// after the same checks of names and strings.
func DecodeJSON(c echo.Context, v any) error {
	return DecodeAs(c, v, echo.MIMEApplicationJSON)
}

// DecodeAs is DecodeJSON for a JSON body of another media type (such as
// application/cloudevents+json): its Content-Type must be mediaType (else
// 415), and every other rule is DecodeJSON's.
func DecodeAs(c echo.Context, v any, mediaType string) error {
	raw, err := readBody(c)
	if err != nil {
		return err
	}
	if len(raw) > 0 {
		if err := requireType(c.Request(), mediaType); err != nil {
			return err
		}
	}
	return Unmarshal(raw, v)
}

// DecodeEmpty accepts a request that has no body (or only white space) or whose
// body is the empty JSON object: what many clients send with every POST. Any other
// body is refused as DecodeJSON refuses one for a struct with no fields: 415
// without application/json, 400 for anything but {}.
func DecodeEmpty(c echo.Context) error {
	raw, err := readBody(c)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if err := requireType(c.Request(), echo.MIMEApplicationJSON); err != nil {
		return err
	}
	return Unmarshal(raw, &struct{}{})
}

// Unmarshal decodes raw into v with DecodeJSON's rules of names, shape, UTF-8
// and NUL, for a body that arrived some other way (a NATS message).
func Unmarshal(raw []byte, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return fault.Errorf(fault.Invalid, "body is empty")
	}
	// NUL is the one rule the unmarshal below does not check: JSON allows it,
	// but no field of this API does (PostgreSQL text cannot hold it). A JSON
	// string can hold NUL only as the escape \u0000 (a raw control byte is
	// invalid JSON, which the unmarshal refuses), so a body without that escape
	// takes one pass, not two: the consumer drain's profile put the second at a
	// third of the decoding (BENCHMARKS.md, "The consumer's limit").
	if bytes.Contains(raw, nulEscape) {
		if err := refuseNUL(raw); err != nil {
			return err
		}
	}
	// The unmarshal refuses a duplicate member and invalid UTF-8 anywhere,
	// json.RawMessage members included, as jsontext reads every value whole.
	if err := jsonv2.Unmarshal(raw, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		return decodeError(err)
	}
	return nil
}

// nulEscape is how NUL appears in a JSON string; its u is lowercase only.
var nulEscape = []byte(`\u0000`)

// refuseNUL passes over raw's tokens and refuses the first string, member
// names included, that holds NUL, naming it by its JSON pointer; a syntax
// error before it is refused as the unmarshal would (a duplicate member, bad
// UTF-8, ...).
func refuseNUL(raw []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return decodeError(err)
		}
		if tok.Kind() == '"' && strings.ContainsRune(tok.String(), 0) {
			return fault.Errorf(fault.Invalid, "%s must not contain NUL (U+0000)", where(dec.StackPointer()))
		}
	}
}

// Bodies bounds the body of every request before any handler or middleware
// of a route can read it: a multipart body (of any multipart type) is a 415
// and one whose Content-Length is over MaxBody a 413, both without reading a
// byte of it; any other body is read through an http.MaxBytesReader of
// MaxBody bytes, so a body without a length (chunked) that runs over is cut
// there and its reader fails. Nothing a route does can then hold more than
// MaxBody bytes of a request in memory, nor write one to disk (only a
// multipart form is spooled to temporary files, and none is parsed). A route
// may bound its bodies tighter (LimitBody).
func Bodies(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := LimitBody(c, MaxBody); err != nil {
			return err
		}
		return next(c)
	}
}

// LimitBody refuses, without reading it, a request body that is multipart
// (415) or whose Content-Length is over limit (413), and bounds the rest to
// limit bytes with an http.MaxBytesReader. A request without a body passes.
func LimitBody(c echo.Context, limit int64) error {
	r := c.Request()
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	// The raw value, not mime.ParseMediaType's: a malformed multipart type is
	// refused too, whatever a later parser would make of it.
	if ct := strings.ToLower(strings.TrimSpace(r.Header.Get(echo.HeaderContentType))); strings.HasPrefix(ct, "multipart/") {
		return fault.Errorf(fault.UnsupportedMediaType, "multipart bodies are not accepted")
	}
	if r.ContentLength > limit {
		return fault.Errorf(fault.TooLarge, "body is larger than %d bytes", limit)
	}
	r.Body = http.MaxBytesReader(c.Response(), r.Body, limit)
	return nil
}

// readBody reads at most MaxBody bytes of the request body.
func readBody(c echo.Context) ([]byte, error) {
	raw, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, MaxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, fault.Errorf(fault.TooLarge, "body is larger than %d bytes", tooLarge.Limit)
	case err != nil:
		// It came from reading the body (a timeout, a reset connection), and its
		// text may name internal addresses: answer a fixed message.
		return nil, fault.Errorf(fault.Invalid, "body could not be read")
	}
	return raw, nil
}

// requireType refuses a body whose Content-Type is missing or is not
// mediaType (parameters such as charset=utf-8 are allowed).
func requireType(r *http.Request, mediaType string) error {
	ct := r.Header.Get(echo.HeaderContentType)
	if ct == "" {
		return fault.Errorf(fault.UnsupportedMediaType, "Content-Type must be %s, got none", mediaType)
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != mediaType {
		return fault.Errorf(fault.UnsupportedMediaType, "Content-Type must be %s, got %q", mediaType, Clip(ct, MaxEcho))
	}
	return nil
}

// where names a member of the body by its JSON pointer, in words.
func where(p jsontext.Pointer) string {
	if p == "" {
		return "body"
	}
	return fmt.Sprintf("field %q", Clip(string(p), MaxEcho))
}

func decodeError(err error) error {
	var syntax *jsontext.SyntacticError
	var semantic *jsonv2.SemanticError
	switch {
	case errors.As(err, &syntax):
		switch {
		case errors.Is(syntax.Err, jsontext.ErrDuplicateName):
			return fault.Errorf(fault.Invalid, "%s: a member is given more than once", where(syntax.JSONPointer))
		case errors.Is(syntax.Err, io.ErrUnexpectedEOF):
			return fault.Errorf(fault.Invalid, "body is not valid JSON (it ends early)")
		case strings.Contains(syntax.Error(), "after top-level value"):
			return fault.Errorf(fault.Invalid, "body must hold a single JSON value")
		case strings.Contains(syntax.Error(), "UTF-8"), strings.Contains(syntax.Error(), "surrogate"):
			return fault.Errorf(fault.Invalid, "%s must be valid UTF-8", where(syntax.JSONPointer))
		}
		return fault.Errorf(fault.Invalid, "body is not valid JSON (at byte %d)", syntax.ByteOffset)
	case errors.As(err, &semantic):
		if errors.Is(semantic.Err, jsonv2.ErrUnknownName) {
			name := string(semantic.JSONPointer)
			if i := strings.LastIndexByte(name, '/'); i >= 0 {
				name = name[i+1:]
			}
			return fault.Errorf(fault.Invalid, "body: unknown field %q", Clip(strings.NewReplacer("~1", "/", "~0", "~").Replace(name), MaxEcho))
		}
		return fault.Errorf(fault.Invalid, "%s must be %s", where(semantic.JSONPointer), jsonKind(semantic.GoType))
	}
	return fault.Errorf(fault.Invalid, "body is not valid JSON")
}

// jsonKind names, in JSON's words, what a value decoded into t must be.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "another JSON value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a JSON string"
	case reflect.Bool:
		return "a JSON boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a JSON integer in range"
	case reflect.Float32, reflect.Float64:
		return "a JSON number"
	case reflect.Struct, reflect.Map:
		return "a JSON object"
	case reflect.Slice, reflect.Array:
		return "a JSON array"
	}
	return "another JSON value"
}

// CheckQuery refuses a request whose query holds a parameter not in allowed, or
// one of them more than once: the contract makes anything else in a query a 400
// on every API operation, and a repeated parameter has no single meaning.
func CheckQuery(c echo.Context, allowed ...string) error {
	q := c.QueryParams()
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	sort.Strings(names) // name the same parameter on every run
	for _, name := range names {
		known := false
		for _, a := range allowed {
			known = known || a == name
		}
		switch {
		case !known:
			return fault.Errorf(fault.Invalid, "unknown query parameter %q", Clip(name, MaxEcho))
		case len(q[name]) > 1:
			return fault.Errorf(fault.Invalid, "query parameter %q given more than once", Clip(name, MaxEcho))
		}
	}
	return nil
}

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

// Server runs an http.Server for the echo instance. Once Stop begins it answers
// every request that had not yet reached a handler with 503 and Connection: close
// (/readyz included, so a load balancer takes it out at once; /healthz and
// /metrics still answer), so a request that arrives after the stop began is never
// committed.
type Server struct {
	srv            *http.Server
	handler        http.Handler
	addr           string
	requestTimeout time.Duration
	ln             net.Listener
	logger         *slog.Logger
	done           chan struct{}
	draining       atomic.Bool
	secure         bool // Config.SecureCookies
}

// NewServer returns a server for e on cfg.Addr; it listens only when started.
func NewServer(cfg Config, e *echo.Echo, logger *slog.Logger) *Server {
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	s := &Server{addr: cfg.Addr, handler: e, requestTimeout: timeout, logger: logger, secure: cfg.SecureCookies}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      timeout + drainSlack,
		IdleTimeout:       2 * time.Minute,
		// The server's own complaints (a bad TLS handshake, a superfluous
		// WriteHeader) go through slog too: one JSON object a line.
		ErrorLog: slog.NewLogLogger(logger.With("component", "http").Handler(), slog.LevelWarn),
	}
	return s
}

// DrainTimeout is the share of the stop budget Stop needs: the request timeout,
// so that every request in flight can finish, plus a little to write its answer.
func (s *Server) DrainTimeout() time.Duration { return s.requestTimeout + drainSlack }

// ServeHTTP refuses new requests once the server is draining, and gives every
// other request its deadline.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() && r.URL.Path != "/healthz" && r.URL.Path != "/metrics" {
		w.Header().Set("Connection", "close")
		w.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"code":"unavailable","message":"shutting down, retry on another instance"}}`+"\n")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.requestTimeout)
	defer cancel()
	if s.secure {
		ctx = context.WithValue(ctx, secureKey{}, true)
	}
	inner := r.WithContext(ctx)
	s.handler.ServeHTTP(w, inner)
	// net/http removes the temporary files of the request it passed in, not of
	// this copy's: should a handler ever parse a multipart form (Bodies refuses
	// one on every route), its files must not outlive the request.
	if inner.MultipartForm != nil && inner.MultipartForm != r.MultipartForm {
		_ = inner.MultipartForm.RemoveAll()
	}
}

// secureKey marks the context of a request that Config.SecureCookies says
// reached the service over HTTPS.
type secureKey struct{}

// Secure reports whether r reached the service over HTTPS: it arrived over
// TLS, or the server's Config.SecureCookies says a proxy in front terminates
// TLS. A cookie set in answer to r is Secure when this is true.
func Secure(r *http.Request) bool {
	on, _ := r.Context().Value(secureKey{}).(bool)
	return r.TLS != nil || on
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

// Stop closes the listener at once (new connections are refused), answers 503 to
// any request that had not reached a handler yet, and lets the requests in flight
// finish until ctx ends; then it closes what is left, logging how it ended.
func (s *Server) Stop(ctx context.Context) error {
	s.draining.Store(true)
	if s.done == nil {
		return nil // never started
	}
	start := time.Now()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
		s.logger.Warn("http drain ran out of its budget; cut the requests still in flight",
			"duration_ms", time.Since(start).Milliseconds(), "error", err)
	} else {
		s.logger.Info("http drained", "duration_ms", time.Since(start).Milliseconds())
	}
	<-s.done
	return nil
}

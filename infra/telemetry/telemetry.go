// Package telemetry is the services' OpenTelemetry tracing: off by default at no
// cost (no SDK, no exporter, the global no-op provider, and every instrumented
// path checks Enabled before it does any span work), on when
// OTEL_EXPORTER_OTLP_ENDPOINT (or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) is set.
// Then it installs an SDK tracer provider exporting OTLP over HTTP/protobuf,
// configured by the SDK's own handling of the standard OTEL_* variables
// (endpoint, headers, OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER, OTEL_BSP_*), and the W3C trace-context propagator. It also
// holds the pieces the other packages share: the slog handler that adds trace_id
// and span_id to log lines, the echo middleware and the HTTP client transport.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"
	"go.opentelemetry.io/contrib/instrumentation/github.com/labstack/echo/otelecho"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/stopbudget"
)

// Propagator is the one propagator every hop uses, whatever the global one is:
// W3C traceparent and tracestate.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// initial is the global provider before anyone set one: the API's delegating
// no-op. Enabled compares against it, so a test that installs an SDK provider
// with otel.SetTracerProvider turns the instrumentation on as Start does.
var initial = otel.GetTracerProvider()

// Enabled reports whether a real tracer provider is installed. It costs an atomic
// load and no allocation; every instrumented path checks it first, so with tracing
// off no span, context or attribute is made.
func Enabled() bool {
	tp := otel.GetTracerProvider()
	if tp == initial {
		return false
	}
	_, isNoop := tp.(noop.TracerProvider)
	return !isNoop
}

// Tracer returns the named tracer of the global provider.
func Tracer(name string) trace.Tracer { return otel.GetTracerProvider().Tracer(name) }

// Config is how a service starts its tracing.
type Config struct {
	// Service is the default service.name; OTEL_SERVICE_NAME overrides it.
	Service string
	// Lookup reads the environment (os.LookupEnv in the binaries).
	Lookup func(string) (string, bool)
}

// Provider is the installed tracer provider, or nothing when tracing is off.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// On reports whether cfg asks for tracing: an OTLP endpoint is set and
// OTEL_SDK_DISABLED is not true.
func (cfg Config) On() bool {
	get := func(k string) string {
		if cfg.Lookup == nil {
			return ""
		}
		v, _ := cfg.Lookup(k)
		return strings.TrimSpace(v)
	}
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	return get("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Start installs the SDK provider and the propagator globally when cfg.On, and
// returns a Provider whose Shutdown flushes it. When off it installs nothing and
// its Shutdown does nothing. Only OTLP over HTTP/protobuf is built in: another
// OTEL_EXPORTER_OTLP_PROTOCOL stops start-up with a message naming the variable.
func Start(ctx context.Context, cfg Config) (*Provider, error) {
	if !cfg.On() {
		return &Provider{}, nil
	}
	for _, k := range []string{"OTEL_EXPORTER_OTLP_PROTOCOL", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"} {
		if v, ok := cfg.Lookup(k); ok && v != "" && v != "http/protobuf" {
			return nil, fmt.Errorf("%s: %q is not supported, only http/protobuf is built in", k, v)
		}
	}
	// The exporter reads OTEL_EXPORTER_OTLP_* itself; it connects lazily, so an
	// unreachable collector never stops start-up (spans are dropped and the SDK
	// logs the export error).
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTEL_EXPORTER_OTLP_ENDPOINT: %w", err)
	}
	// Later options win: the default name first, then OTEL_SERVICE_NAME and
	// OTEL_RESOURCE_ATTRIBUTES.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(semconv.ServiceName(cfg.Service)),
		resource.WithFromEnv(),
	)
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(Propagator)
	return &Provider{tp: tp}, nil
}

// Shutdown flushes the spans still buffered and stops the exporter, until ctx ends.
func (p *Provider) Shutdown(ctx context.Context) error {
	if p == nil || p.tp == nil {
		return nil
	}
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("telemetry: flush spans: %w", err)
	}
	return nil
}

// On reports whether p exports spans (Start installed an SDK provider). The
// constructors that instrument (web.Module's echo, database.Module's pool)
// take the *Provider and ask it, rather than the global provider, so they
// need not be built after Start in registration order: fx builds them after
// it because they depend on it.
func (p *Provider) On() bool { return p != nil && p.tp != nil }

// StopShare is the flush's share of the stop budget (contract section 5):
// it stops last.
var StopShare = stopbudget.Share{Name: "telemetry", Timeout: time.Second}

// Module starts tracing with the app (the app supplies Config and *slog.Logger),
// provides the *Provider, and flushes it on stop, within StopShare. Put it
// first among the modules: fx stops in reverse, so the spans of everything
// else are ended before the flush.
var Module = stopbudget.Module(StopShare, fx.Module("telemetry",
	fx.Provide(func(lc fx.Lifecycle, cfg Config, logger *slog.Logger) (*Provider, error) {
		p, err := Start(context.Background(), cfg)
		if err != nil {
			return nil, err
		}
		if p.tp != nil {
			logger.Info("tracing on: exporting OTLP over HTTP")
		}
		lc.Append(fx.Hook{OnStop: p.Shutdown})
		return p, nil
	}),
	// Started here, first, whoever asks for it: its flush is the last stop.
	fx.Invoke(func(*Provider) {}),
))

// Middleware traces every request but /healthz, /readyz and /metrics as a server
// span named by its route template, continuing the caller's traceparent. With
// tracing off (the provider switched back) it only calls next. Use it before the
// request log, so the log line is written inside the span.
func Middleware() echo.MiddlewareFunc {
	traced := otelecho.Middleware("outboxpair",
		otelecho.WithPropagators(Propagator),
		otelecho.WithSkipper(func(c echo.Context) bool {
			switch c.Path() {
			case "/healthz", "/readyz", "/metrics":
				return true
			}
			return false
		}),
	)
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !Enabled() {
				return next(c)
			}
			return traced(next)(c)
		}
	}
}

// Transport wraps base so that, with tracing on, each request is a client span
// and carries its traceparent; with tracing off it is base.
func Transport(base http.RoundTripper) http.RoundTripper {
	return switched{base: base, traced: otelhttp.NewTransport(base, otelhttp.WithPropagators(Propagator))}
}

type switched struct{ base, traced http.RoundTripper }

func (s switched) RoundTrip(r *http.Request) (*http.Response, error) {
	if Enabled() {
		return s.traced.RoundTrip(r)
	}
	return s.base.RoundTrip(r)
}

package telemetry_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

// tracing switches the global provider for one benchmark: off is the no-op
// provider (what a service without OTEL_EXPORTER_OTLP_ENDPOINT runs), on an SDK
// provider that samples everything and exports synchronously to a no-op
// exporter (the cost of making the spans, not of shipping them).
func tracing(b *testing.B, on bool) {
	b.Helper()
	prev := otel.GetTracerProvider()
	if on {
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(tracetest.NewNoopExporter()))
		otel.SetTracerProvider(tp)
	} else {
		otel.SetTracerProvider(noop.NewTracerProvider())
	}
	require.Equal(b, on, telemetry.Enabled())
	b.Cleanup(func() { otel.SetTracerProvider(prev) })
}

type event struct {
	N int `json:"n"`
}

func (event) EventTag() string { return "BenchEvent" }

// BenchmarkAppend is outbox.Append inside an open transaction, with tracing off
// (no span in the context: nothing is stored, nothing more is done) and on (the
// caller's span: its trace context is encoded and stored with the row).
func BenchmarkAppend(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "tracing off", true: "tracing on"}[on], func(b *testing.B) {
			tracing(b, on)
			db := pgtest.New(b, migrations.Labeling) // opened after the switch: its pool traces only when on
			ctx := context.Background()
			var span trace.Span
			ctx, span = telemetry.Tracer("bench").Start(ctx, "request")
			defer span.End()
			tx, err := db.Pool.Begin(ctx)
			require.NoError(b, err)
			defer tx.Rollback(ctx) //nolint:errcheck
			b.ReportAllocs()
			for b.Loop() {
				if _, err := outbox.Append(ctx, outbox.NewPostgresStore(nil), postgres.TxOf(tx), event{N: 1}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkRequest is one request through the shared echo stack (web.New: the
// tracing middleware, the request log with its trace fields, metrics, the error
// handler) to a handler that answers 204, with tracing off and on.
func BenchmarkRequest(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(map[bool]string{false: "tracing off", true: "tracing on"}[on], func(b *testing.B) {
			tracing(b, on)
			logger := slog.New(telemetry.LogHandler(slog.NewJSONHandler(io.Discard, nil)))
			e := web.New(logger, nil, web.Traced(on))
			e.POST("/v1/orgs/:orgId/things", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
			req := httptest.NewRequest(http.MethodPost, "/v1/orgs/0197a3c2-6a1e-7c3b-9f1d-2b4e5a6c7d8e/things", nil)
			req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				e.ServeHTTP(w, req)
				if w.Code != http.StatusNoContent {
					b.Fatalf("status %d", w.Code)
				}
			}
		})
	}
}

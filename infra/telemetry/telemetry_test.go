package telemetry_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/telemetry"
)

func lookup(env map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := env[k]; return v, ok }
}

func TestConfig(t *testing.T) {
	t.Parallel()

	t.Run("tracing is off without an OTLP endpoint, and Start then installs nothing", func(t *testing.T) {
		t.Parallel()
		cfg := telemetry.Config{Service: "labeling", Lookup: lookup(map[string]string{"OTEL_SERVICE_NAME": "x"})}
		require.False(t, cfg.On())
		p, err := telemetry.Start(context.Background(), cfg)
		require.NoError(t, err)
		require.NoError(t, p.Shutdown(context.Background()))
	})

	t.Run("an endpoint turns it on, for all signals or for traces only", func(t *testing.T) {
		t.Parallel()
		require.True(t, telemetry.Config{Lookup: lookup(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})}.On())
		require.True(t, telemetry.Config{Lookup: lookup(map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"})}.On())
	})

	t.Run("OTEL_SDK_DISABLED=true keeps it off", func(t *testing.T) {
		t.Parallel()
		require.False(t, telemetry.Config{Lookup: lookup(map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_SDK_DISABLED": "true",
		})}.On())
	})

	t.Run("a protocol other than http/protobuf stops start-up naming the variable", func(t *testing.T) {
		t.Parallel()
		_, err := telemetry.Start(context.Background(), telemetry.Config{Service: "billing", Lookup: lookup(map[string]string{
			"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
		})})
		require.ErrorContains(t, err, "OTEL_EXPORTER_OTLP_PROTOCOL")
	})
}

func TestLogHandler(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(telemetry.LogHandler(slog.NewJSONHandler(&buf, nil))).With("service", "labeling")
	line := func() map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal(buf.Bytes(), &m))
		buf.Reset()
		return m
	}

	t.Run("a line logged inside a span carries its trace and span ids", func(t *testing.T) {
		ctx, span := telemetry.Tracer("test").Start(context.Background(), "op")
		defer span.End()
		logger.InfoContext(ctx, "inside", "k", "v")
		m := line()
		require.Equal(t, span.SpanContext().TraceID().String(), m["trace_id"])
		require.Equal(t, span.SpanContext().SpanID().String(), m["span_id"])
		require.Equal(t, "labeling", m["service"])
		require.Equal(t, "v", m["k"])
	})

	t.Run("a line without a span has neither", func(t *testing.T) {
		logger.InfoContext(context.Background(), "outside")
		m := line()
		require.NotContains(t, m, "trace_id")
		require.NotContains(t, m, "span_id")
	})
}

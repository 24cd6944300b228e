package outbox

import (
	"context"
	"encoding/json"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/outboxpair/infra/telemetry"
)

// tracerName is the instrumentation scope of the relay's spans.
const tracerName = "github.com/acme/outboxpair/infra/outbox"

// traceContext is the W3C trace context of ctx's span as the row's trace_context
// ({"traceparent","tracestate"}), or nil (NULL) when ctx holds no valid span: an
// untraced append stores nothing and costs nothing more.
func traceContext(ctx context.Context) []byte {
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return nil
	}
	carrier := propagation.MapCarrier{}
	telemetry.Propagator.Inject(ctx, carrier)
	b, err := json.Marshal(carrier)
	if err != nil {
		return nil // a map of strings always encodes; no trace is better than no row
	}
	return b
}

// linkOf is the span context stored in a row's trace_context, invalid when there is
// none or it does not parse.
func linkOf(stored string) trace.SpanContext {
	var carrier propagation.MapCarrier
	if json.Unmarshal([]byte(stored), &carrier) != nil {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(telemetry.Propagator.Extract(context.Background(), carrier))
}

// processSpan starts the span of j's dispatch when tracing is on and the row
// carries the trace context of its append (messaging conventions, "process"): a
// new root of kind consumer, linked to the append's span rather than its child,
// since the request that made the fact ended long ago. The subscribers run under
// it, so a delivery carries its traceparent. Otherwise it returns ctx and a nil
// span, having done nothing.
func processSpan(ctx context.Context, j job) (context.Context, trace.Span) {
	if len(j.trace) == 0 || !telemetry.Enabled() {
		return ctx, nil
	}
	link := linkOf(j.trace)
	if !link.IsValid() {
		return ctx, nil
	}
	return telemetry.Tracer(tracerName).Start(ctx, "outbox process "+j.Tag,
		trace.WithNewRoot(),
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(trace.Link{SpanContext: link}),
		trace.WithAttributes(
			attribute.String("messaging.system", "outbox"),
			attribute.String("messaging.operation", "process"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", j.Tag),
			attribute.String("messaging.message.id", j.sent().ID.String()),
			attribute.Int("messaging.outbox.attempt", j.Attempt),
		))
}

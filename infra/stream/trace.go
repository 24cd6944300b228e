package stream

import (
	"context"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/telemetry"
)

const tracerName = "github.com/acme/outboxpair/infra/stream"

// HeaderCarrier carries the W3C trace context in a NATS message's headers
// (traceparent, tracestate), as a propagation.TextMapCarrier.
type HeaderCarrier nats.Header

// Get returns the first value of key.
func (h HeaderCarrier) Get(key string) string { return nats.Header(h).Get(key) }

// Set sets key to value.
func (h HeaderCarrier) Set(key, value string) { nats.Header(h).Set(key, value) }

// Keys lists the keys present.
func (h HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// publishSpan starts a producer span for msg under ctx's span (the relay's
// process span) and writes its traceparent into msg's headers. With tracing off
// it does nothing.
func publishSpan(ctx context.Context, msg *nats.Msg, m outbox.Message) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return ctx, nil
	}
	ctx, span := telemetry.Tracer(tracerName).Start(ctx, "publish "+msg.Subject,
		trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation", "publish"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.destination.name", msg.Subject),
			attribute.String("messaging.message.id", m.ID.String()),
		))
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	telemetry.Propagator.Inject(ctx, HeaderCarrier(msg.Header))
	return ctx, span
}

// consumeSpan continues the trace a message's headers carry: a consumer span,
// child of the publisher's, under which the handler runs. With tracing off, or a
// message without a traceparent, it does nothing.
func consumeSpan(ctx context.Context, msg jetstream.Msg, m Message, durable string) (context.Context, trace.Span) {
	if !telemetry.Enabled() {
		return ctx, nil
	}
	h := msg.Headers()
	if h.Get("traceparent") == "" {
		return ctx, nil
	}
	ctx = telemetry.Propagator.Extract(ctx, HeaderCarrier(h))
	return telemetry.Tracer(tracerName).Start(ctx, "process "+m.Subject,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "nats"),
			attribute.String("messaging.operation", "process"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", m.Subject),
			attribute.String("messaging.consumer.group.name", durable),
			attribute.String("messaging.message.id", m.MsgID),
			attribute.Int64("messaging.nats.delivered", int64(m.Delivered)),
		))
}

func endSpan(span trace.Span, err error) {
	if span == nil {
		return
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, "failed")
	}
	span.End()
}

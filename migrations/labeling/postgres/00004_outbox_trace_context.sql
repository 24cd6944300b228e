-- +goose Up
-- Tracing (issue 12): the W3C trace context of the transaction that appended the
-- row, {"traceparent": "...", "tracestate": "..."}, so the relay's dispatch can
-- link its span to the request that made the fact. Additive and nullable: it is
-- NULL when the appender was not traced (tracing off), for rows written before
-- this migration, and for rows written by an older labeling during a rolling
-- deploy; the relay then dispatches without a span.
ALTER TABLE outbox_events ADD COLUMN trace_context jsonb;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN trace_context;

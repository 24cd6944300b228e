-- +goose Up
-- The W3C trace context of the appending request, JSON text; NULL when untraced.
ALTER TABLE outbox_events ADD COLUMN trace_context TEXT;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN trace_context;

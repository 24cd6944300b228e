-- +goose Up
-- One row per delivery (see the PostgreSQL migration of the same version): the
-- subscriber the row is for ('' = billing) and the event's id when it differs
-- from the row's (TEXT, lowercase canonical form, as every uuid here).
ALTER TABLE outbox_events ADD COLUMN subscriber TEXT NOT NULL DEFAULT '';
ALTER TABLE outbox_events ADD COLUMN event_id TEXT;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN event_id;
ALTER TABLE outbox_events DROP COLUMN subscriber;

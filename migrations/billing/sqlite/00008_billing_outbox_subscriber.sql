-- +goose Up
-- The two columns of labeling's 00006 (see the PostgreSQL migration of the
-- same version).
ALTER TABLE billing_outbox_events ADD COLUMN subscriber TEXT NOT NULL DEFAULT '';
ALTER TABLE billing_outbox_events ADD COLUMN event_id TEXT;

-- +goose Down
ALTER TABLE billing_outbox_events DROP COLUMN event_id;
ALTER TABLE billing_outbox_events DROP COLUMN subscriber;

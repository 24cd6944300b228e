-- +goose Up
-- Fan-out over HTTP (issue 33): one row per delivery. A row is one event for
-- one subscriber; '' is the subscriber every row before this migration was for
-- (billing, BILLING_URL), so existing rows, and the rows an older labeling
-- appends during a rolling deploy, stay billing's. event_id is the event's id
-- when it differs from the row's: Append gives the billing row (subscriber '')
-- the event's id as its own id and leaves event_id NULL, and gives each further
-- subscriber's row a fresh id and event_id = that id, so every subscriber
-- receives the same id to dedup on (coalesce(event_id, id)). Both columns are
-- additive: a constant default is a catalogue change on PostgreSQL 11+, no
-- rewrite, and an older labeling, which neither writes nor reads them, keeps
-- working on the new schema (it claims every row, though: stop it before
-- configuring SUBSCRIBERS, docs/operations.md "Adding a subscriber").
ALTER TABLE outbox_events ADD COLUMN subscriber text NOT NULL DEFAULT '';
ALTER TABLE outbox_events ADD COLUMN event_id uuid;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN event_id;
ALTER TABLE outbox_events DROP COLUMN subscriber;

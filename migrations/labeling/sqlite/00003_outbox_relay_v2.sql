-- +goose Up
-- The claim token (see the PostgreSQL migration of the same version). SQLite
-- has no autovacuum settings to tune: deleted pages are reused in place.
ALTER TABLE outbox_events ADD COLUMN claim_token TEXT;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN claim_token;

-- +goose Up
-- The lease, in ms, of the claim that holds the row (see the PostgreSQL
-- migration of the same version).
ALTER TABLE outbox_events ADD COLUMN claim_lease INTEGER;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN claim_lease;

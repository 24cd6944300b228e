-- +goose Up
-- billing_quota.version on SQLite (see the PostgreSQL migration of the same
-- version): the org's count of quota changes, taken in the transaction that
-- changes the quota, which holds SQLite's write lock.
ALTER TABLE billing_quota ADD COLUMN version INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE billing_quota DROP COLUMN version;

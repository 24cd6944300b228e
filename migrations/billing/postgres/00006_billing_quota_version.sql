-- +goose Up
-- billing_quota.version (issue 32): how many times the org's quota changed,
-- counted under the quota row's lock in the statement that changes it, so
-- that the QuotaChanged rows of one org are totally ordered by it whatever
-- the replicas, the group apply or the retries did (docs/calling-the-outside-world.md):
-- a QuotaChanged row carries its change's version, and a provider keeps the
-- count of the highest. An org's first change after this migration is
-- version 1 (existing rows start at 0). A constant default: PostgreSQL 11 and
-- later add the column without rewriting the table.
ALTER TABLE billing_quota ADD COLUMN version bigint NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE billing_quota DROP COLUMN version;

-- +goose Up
-- billing on SQLite: uuid is TEXT in lowercase canonical form, bigint and times
-- INTEGER (epoch ms).
CREATE TABLE billing_quota (
    org_id       TEXT    PRIMARY KEY,
    active_rules INTEGER NOT NULL DEFAULT 0,
    updated_at   INTEGER NOT NULL
);

-- A receipt per applied event, written in the same transaction as its effect.
CREATE TABLE billing_receipts (
    event_id   TEXT    PRIMARY KEY,
    created_at INTEGER NOT NULL
);

-- Retention deletes receipts by age without scanning the table.
CREATE INDEX billing_receipts_created_at_idx ON billing_receipts (created_at);

-- +goose Down
DROP TABLE billing_receipts;
DROP TABLE billing_quota;

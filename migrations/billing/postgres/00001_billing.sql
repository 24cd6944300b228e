-- +goose Up
CREATE TABLE billing_quota (
    org_id       uuid   PRIMARY KEY,
    active_rules bigint NOT NULL DEFAULT 0,
    updated_at   bigint NOT NULL
);

-- A receipt per applied event, written in the same transaction as its effect.
CREATE TABLE billing_receipts (
    event_id   uuid   PRIMARY KEY,
    created_at bigint NOT NULL
);

-- Retention deletes receipts by age without scanning the table.
CREATE INDEX billing_receipts_created_at_idx ON billing_receipts (created_at);

-- +goose Down
DROP TABLE billing_receipts;
DROP TABLE billing_quota;

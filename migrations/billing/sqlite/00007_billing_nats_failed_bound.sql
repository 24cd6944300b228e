-- +goose Up
-- As on PostgreSQL (see its 00007 for the reasons): verified (0/1) with a
-- partial index of the unverified records oldest first, and the table's
-- record count and payload bytes in billing_nats_failed_size, kept by
-- triggers (row-level: SQLite has no statement-level ones).
ALTER TABLE billing_nats_failed ADD COLUMN verified INTEGER NOT NULL DEFAULT 0;
CREATE INDEX billing_nats_failed_unverified ON billing_nats_failed (id) WHERE NOT verified;
CREATE TABLE billing_nats_failed_size (
    one     INTEGER PRIMARY KEY DEFAULT 1 CHECK (one = 1),
    records INTEGER NOT NULL,
    bytes   INTEGER NOT NULL
);
INSERT INTO billing_nats_failed_size (records, bytes)
    SELECT count(*), coalesce(sum(length(payload)), 0) FROM billing_nats_failed;
-- +goose StatementBegin
CREATE TRIGGER billing_nats_failed_sized_insert AFTER INSERT ON billing_nats_failed BEGIN
    UPDATE billing_nats_failed_size SET records = records + 1, bytes = bytes + length(NEW.payload);
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER billing_nats_failed_sized_delete AFTER DELETE ON billing_nats_failed BEGIN
    UPDATE billing_nats_failed_size SET records = records - 1, bytes = bytes - length(OLD.payload);
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER billing_nats_failed_sized_delete;
DROP TRIGGER billing_nats_failed_sized_insert;
DROP TABLE billing_nats_failed_size;
DROP INDEX billing_nats_failed_unverified;
ALTER TABLE billing_nats_failed DROP COLUMN verified;

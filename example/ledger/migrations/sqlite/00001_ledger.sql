-- +goose Up
-- As on PostgreSQL (see its 00001): uuids as their text, bigints as INTEGER.
CREATE TABLE ledger_entries (
    event_id    TEXT    PRIMARY KEY,
    org_id      TEXT    NOT NULL,
    rule_id     TEXT    NOT NULL,
    occurred_at INTEGER NOT NULL,
    created_at  INTEGER NOT NULL
);
CREATE INDEX ledger_entries_org_idx ON ledger_entries (org_id, event_id);

CREATE TABLE ledger_receipts (event_id TEXT PRIMARY KEY, created_at INTEGER NOT NULL);
CREATE INDEX ledger_receipts_created_at_idx ON ledger_receipts (created_at);
CREATE TABLE ledger_nats_failed (
    id INTEGER PRIMARY KEY AUTOINCREMENT, stream_seq INTEGER NOT NULL,
    subject BLOB NOT NULL, msg_id BLOB NOT NULL, payload BLOB NOT NULL, reason TEXT NOT NULL,
    deliveries INTEGER NOT NULL, failed_at INTEGER NOT NULL, stored_at INTEGER NOT NULL DEFAULT 0, signature BLOB,
    verified INTEGER NOT NULL DEFAULT 0);
CREATE UNIQUE INDEX ledger_nats_failed_message ON ledger_nats_failed (stream_seq, stored_at);
CREATE INDEX ledger_nats_failed_unverified ON ledger_nats_failed (id) WHERE NOT verified;
CREATE TABLE ledger_nats_failed_size (one INTEGER PRIMARY KEY DEFAULT 1 CHECK (one = 1), records INTEGER NOT NULL, bytes INTEGER NOT NULL);
INSERT INTO ledger_nats_failed_size (records, bytes) VALUES (0, 0);
-- +goose StatementBegin
CREATE TRIGGER ledger_nats_failed_sized_insert AFTER INSERT ON ledger_nats_failed BEGIN
    UPDATE ledger_nats_failed_size SET records = records + 1, bytes = bytes + length(NEW.payload); END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER ledger_nats_failed_sized_delete AFTER DELETE ON ledger_nats_failed BEGIN
    UPDATE ledger_nats_failed_size SET records = records - 1, bytes = bytes - length(OLD.payload); END;
-- +goose StatementEnd

-- +goose Down
DROP TABLE ledger_nats_failed_size;
DROP TABLE ledger_nats_failed;
DROP TABLE ledger_receipts;
DROP TABLE ledger_entries;

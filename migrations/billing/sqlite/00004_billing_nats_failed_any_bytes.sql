-- +goose Up
-- Any bytes recorded, as on PostgreSQL: subject and msg_id become BLOBs (the
-- table is rebuilt, SQLite cannot change a column's type) and signature holds
-- the Events-Signature header, NULL for a record written before this migration.
CREATE TABLE billing_nats_failed_new (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    stream_seq INTEGER NOT NULL,
    subject    BLOB    NOT NULL,
    msg_id     BLOB    NOT NULL,
    payload    BLOB    NOT NULL,
    reason     TEXT    NOT NULL,
    deliveries INTEGER NOT NULL,
    failed_at  INTEGER NOT NULL,
    stored_at  INTEGER NOT NULL DEFAULT 0,
    signature  BLOB
);
INSERT INTO billing_nats_failed_new (id, stream_seq, subject, msg_id, payload, reason, deliveries, failed_at, stored_at)
    SELECT id, stream_seq, CAST(subject AS BLOB), CAST(msg_id AS BLOB), payload, reason, deliveries, failed_at, stored_at
    FROM billing_nats_failed ORDER BY id;
DROP TABLE billing_nats_failed;
ALTER TABLE billing_nats_failed_new RENAME TO billing_nats_failed;
CREATE UNIQUE INDEX billing_nats_failed_message ON billing_nats_failed (stream_seq, stored_at);

-- +goose Down
CREATE TABLE billing_nats_failed_old (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    stream_seq INTEGER NOT NULL,
    subject    TEXT    NOT NULL,
    msg_id     TEXT    NOT NULL,
    payload    BLOB    NOT NULL,
    reason     TEXT    NOT NULL,
    deliveries INTEGER NOT NULL,
    failed_at  INTEGER NOT NULL,
    stored_at  INTEGER NOT NULL DEFAULT 0
);
INSERT INTO billing_nats_failed_old (id, stream_seq, subject, msg_id, payload, reason, deliveries, failed_at, stored_at)
    SELECT id, stream_seq, CAST(subject AS TEXT), CAST(msg_id AS TEXT), payload, reason, deliveries, failed_at, stored_at
    FROM billing_nats_failed ORDER BY id;
DROP TABLE billing_nats_failed;
ALTER TABLE billing_nats_failed_old RENAME TO billing_nats_failed;
CREATE UNIQUE INDEX billing_nats_failed_message ON billing_nats_failed (stream_seq, stored_at);

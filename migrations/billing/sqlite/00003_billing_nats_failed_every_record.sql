-- +goose Up
-- A row per terminated message, keyed (stream_seq, stored_at) as on
-- PostgreSQL. SQLite cannot drop a primary key in place, so the table is
-- rebuilt; id keeps the order recorded (AUTOINCREMENT never reuses an id).
CREATE TABLE billing_nats_failed_new (
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
INSERT INTO billing_nats_failed_new (stream_seq, subject, msg_id, payload, reason, deliveries, failed_at)
    SELECT stream_seq, subject, msg_id, payload, reason, deliveries, failed_at FROM billing_nats_failed ORDER BY rowid;
DROP TABLE billing_nats_failed;
ALTER TABLE billing_nats_failed_new RENAME TO billing_nats_failed;
CREATE UNIQUE INDEX billing_nats_failed_message ON billing_nats_failed (stream_seq, stored_at);

-- +goose Down
CREATE TABLE billing_nats_failed_old (
    stream_seq INTEGER PRIMARY KEY,
    subject    TEXT    NOT NULL,
    msg_id     TEXT    NOT NULL,
    payload    BLOB    NOT NULL,
    reason     TEXT    NOT NULL,
    deliveries INTEGER NOT NULL,
    failed_at  INTEGER NOT NULL
);
INSERT OR IGNORE INTO billing_nats_failed_old (stream_seq, subject, msg_id, payload, reason, deliveries, failed_at)
    SELECT stream_seq, subject, msg_id, payload, reason, deliveries, failed_at FROM billing_nats_failed ORDER BY id;
DROP TABLE billing_nats_failed;
ALTER TABLE billing_nats_failed_old RENAME TO billing_nats_failed;

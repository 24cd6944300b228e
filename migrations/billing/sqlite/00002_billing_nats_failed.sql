-- +goose Up
-- Terminated JetStream messages (see the PostgreSQL migration of the same
-- version); payload is a BLOB.
CREATE TABLE billing_nats_failed (
    stream_seq INTEGER PRIMARY KEY,
    subject    TEXT    NOT NULL,
    msg_id     TEXT    NOT NULL,
    payload    BLOB    NOT NULL,
    reason     TEXT    NOT NULL,
    deliveries INTEGER NOT NULL,
    failed_at  INTEGER NOT NULL
);

-- +goose Down
DROP TABLE billing_nats_failed;

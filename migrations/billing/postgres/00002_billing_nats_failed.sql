-- +goose Up
-- JetStream messages billing terminated because no redelivery could apply them
-- (a malformed envelope or an invalid payload): kept here, with the reason, for an
-- operator (`billing nats failed`). A row per stream sequence, so a message whose
-- term was lost and that comes back is recorded once.
CREATE TABLE billing_nats_failed (
    stream_seq bigint PRIMARY KEY,
    subject    text   NOT NULL,
    msg_id     text   NOT NULL,
    payload    bytea  NOT NULL,
    reason     text   NOT NULL,
    deliveries bigint NOT NULL,
    failed_at  bigint NOT NULL
);

-- +goose Down
DROP TABLE billing_nats_failed;

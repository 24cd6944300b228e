-- +goose Up
-- A row per terminated message, not per stream sequence: a stream deleted and
-- recreated restarts its sequences at 1, and keyed by stream_seq alone the
-- second message at a sequence was terminated with no record. A message is now
-- (stream_seq, stored_at): when the stream stored it, in epoch ns (0 for rows
-- recorded before this migration), the same on every redelivery of it.
ALTER TABLE billing_nats_failed DROP CONSTRAINT billing_nats_failed_pkey;
ALTER TABLE billing_nats_failed ADD COLUMN id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY;
ALTER TABLE billing_nats_failed ADD COLUMN stored_at bigint NOT NULL DEFAULT 0;
CREATE UNIQUE INDEX billing_nats_failed_message ON billing_nats_failed (stream_seq, stored_at);

-- +goose Down
-- Keeps the first record of each sequence: the old key cannot hold the others.
DELETE FROM billing_nats_failed a USING billing_nats_failed b WHERE a.stream_seq = b.stream_seq AND a.id > b.id;
DROP INDEX billing_nats_failed_message;
ALTER TABLE billing_nats_failed DROP COLUMN stored_at;
ALTER TABLE billing_nats_failed DROP COLUMN id;
ALTER TABLE billing_nats_failed ADD PRIMARY KEY (stream_seq);

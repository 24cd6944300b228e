-- +goose Up
-- Any bytes recorded: a subject or Nats-Msg-Id that is not UTF-8 could not be
-- inserted into the text columns, so billing naked such a message for ever. The
-- columns change type in place (not bytea columns beside the text ones): one
-- copy of each fact, and every existing value is valid UTF-8, kept byte for byte.
-- signature is the Events-Signature header, so `billing nats replay` can verify
-- the record again; NULL for a record written before this migration.
ALTER TABLE billing_nats_failed ALTER COLUMN subject TYPE bytea USING convert_to(subject, 'UTF8');
ALTER TABLE billing_nats_failed ALTER COLUMN msg_id TYPE bytea USING convert_to(msg_id, 'UTF8');
ALTER TABLE billing_nats_failed ADD COLUMN signature bytea;

-- +goose Down
-- A value that is not UTF-8 cannot go back into text: it is kept escaped
-- (encode's 'escape' form, \ooo for such bytes), never dropped.
ALTER TABLE billing_nats_failed DROP COLUMN signature;
ALTER TABLE billing_nats_failed ALTER COLUMN subject TYPE text USING encode(subject, 'escape');
ALTER TABLE billing_nats_failed ALTER COLUMN msg_id TYPE text USING encode(msg_id, 'escape');

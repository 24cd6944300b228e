-- +goose Up
-- The ledger's own table: one entry per RuleActivated event applied, keyed by
-- the event id (a second insert of one event would fail: the receipts keep
-- it from being tried).
CREATE TABLE ledger_entries (
    event_id    uuid   PRIMARY KEY,
    org_id      uuid   NOT NULL,
    rule_id     uuid   NOT NULL,
    occurred_at bigint NOT NULL,
    created_at  bigint NOT NULL
);
CREATE INDEX ledger_entries_org_idx ON ledger_entries (org_id, event_id);

-- What infra/inbox needs, copied from billing's final form (docs/adopting.md):
-- the receipts (one per applied event, deleted by age through the index), the
-- NATS messages terminated unapplied and their tally, kept by triggers.
CREATE TABLE ledger_receipts (event_id uuid PRIMARY KEY, created_at bigint NOT NULL);
CREATE INDEX ledger_receipts_created_at_idx ON ledger_receipts (created_at);
CREATE TABLE ledger_nats_failed (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, stream_seq bigint NOT NULL,
    subject bytea NOT NULL, msg_id bytea NOT NULL, payload bytea NOT NULL, reason text NOT NULL,
    deliveries bigint NOT NULL, failed_at bigint NOT NULL, stored_at bigint NOT NULL DEFAULT 0, signature bytea,
    verified boolean NOT NULL DEFAULT false);
CREATE UNIQUE INDEX ledger_nats_failed_message ON ledger_nats_failed (stream_seq, stored_at);
CREATE INDEX ledger_nats_failed_unverified ON ledger_nats_failed (id) WHERE NOT verified;
CREATE TABLE ledger_nats_failed_size (one boolean PRIMARY KEY DEFAULT true CHECK (one), records bigint NOT NULL, bytes bigint NOT NULL);
INSERT INTO ledger_nats_failed_size (records, bytes) VALUES (0, 0);
-- +goose StatementBegin
CREATE FUNCTION ledger_nats_failed_sized() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
    IF TG_OP = 'INSERT' THEN
    UPDATE ledger_nats_failed_size SET records = records + d.n, bytes = bytes + d.b
    FROM (SELECT count(*) AS n, coalesce(sum(length(payload)), 0) AS b FROM new_rows) d WHERE d.n > 0;
    ELSIF TG_OP = 'DELETE' THEN
    UPDATE ledger_nats_failed_size SET records = records - d.n, bytes = bytes - d.b
    FROM (SELECT count(*) AS n, coalesce(sum(length(payload)), 0) AS b FROM old_rows) d WHERE d.n > 0;
    ELSE
    UPDATE ledger_nats_failed_size SET records = 0, bytes = 0;
    END IF;
    RETURN NULL;
    END
    $$;
-- +goose StatementEnd
CREATE TRIGGER ledger_nats_failed_sized_insert AFTER INSERT ON ledger_nats_failed
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION ledger_nats_failed_sized();
CREATE TRIGGER ledger_nats_failed_sized_delete AFTER DELETE ON ledger_nats_failed
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION ledger_nats_failed_sized();
CREATE TRIGGER ledger_nats_failed_sized_truncate AFTER TRUNCATE ON ledger_nats_failed
    FOR EACH STATEMENT EXECUTE FUNCTION ledger_nats_failed_sized();

-- +goose Down
DROP TABLE ledger_nats_failed_size;
DROP TABLE ledger_nats_failed;
DROP FUNCTION ledger_nats_failed_sized();
DROP TABLE ledger_receipts;
DROP TABLE ledger_entries;

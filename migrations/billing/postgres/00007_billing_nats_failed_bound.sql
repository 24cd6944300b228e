-- +goose Up
-- The bound of billing_nats_failed (NATS_FAILED_MAX_ROWS, NATS_FAILED_MAX_BYTES)
-- kept at the cost of what it drops, not of the table (issue 32):
-- verified is whether the record's Events-Signature verified when it was
-- recorded (false for every earlier record: the prune verifies an unverified
-- record again before it drops it, and marks it verified if it passes), and
-- the partial index lists the unverified records oldest first, so the prune
-- never reads a verified one. billing_nats_failed_size is the table's record
-- count and payload bytes, kept by triggers in the statement that inserts or
-- deletes (by billing or by hand), so the bound is checked without a scan.
ALTER TABLE billing_nats_failed ADD COLUMN verified boolean NOT NULL DEFAULT false;
CREATE INDEX billing_nats_failed_unverified ON billing_nats_failed (id) WHERE NOT verified;
CREATE TABLE billing_nats_failed_size (
    one     boolean PRIMARY KEY DEFAULT true CHECK (one),
    records bigint  NOT NULL,
    bytes   bigint  NOT NULL
);
INSERT INTO billing_nats_failed_size (records, bytes)
    SELECT count(*), coalesce(sum(length(payload)), 0) FROM billing_nats_failed;
-- +goose StatementBegin
CREATE FUNCTION billing_nats_failed_sized() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        UPDATE billing_nats_failed_size SET records = records + d.n, bytes = bytes + d.b
        FROM (SELECT count(*) AS n, coalesce(sum(length(payload)), 0) AS b FROM new_rows) d WHERE d.n > 0;
    ELSIF TG_OP = 'DELETE' THEN
        UPDATE billing_nats_failed_size SET records = records - d.n, bytes = bytes - d.b
        FROM (SELECT count(*) AS n, coalesce(sum(length(payload)), 0) AS b FROM old_rows) d WHERE d.n > 0;
    ELSE -- TRUNCATE
        UPDATE billing_nats_failed_size SET records = 0, bytes = 0;
    END IF;
    RETURN NULL;
END
$$;
-- +goose StatementEnd
CREATE TRIGGER billing_nats_failed_sized_insert AFTER INSERT ON billing_nats_failed
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION billing_nats_failed_sized();
CREATE TRIGGER billing_nats_failed_sized_delete AFTER DELETE ON billing_nats_failed
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION billing_nats_failed_sized();
CREATE TRIGGER billing_nats_failed_sized_truncate AFTER TRUNCATE ON billing_nats_failed
    FOR EACH STATEMENT EXECUTE FUNCTION billing_nats_failed_sized();

-- +goose Down
DROP TRIGGER billing_nats_failed_sized_truncate ON billing_nats_failed;
DROP TRIGGER billing_nats_failed_sized_delete ON billing_nats_failed;
DROP TRIGGER billing_nats_failed_sized_insert ON billing_nats_failed;
DROP FUNCTION billing_nats_failed_sized();
DROP TABLE billing_nats_failed_size;
DROP INDEX billing_nats_failed_unverified;
ALTER TABLE billing_nats_failed DROP COLUMN verified;

-- +goose Up
-- billing_outbox_events on SQLite: billing's own outbox (see the PostgreSQL
-- migration of the same version), exactly what labeling's SQLite migrations
-- 00001, 00003, 00004 and 00005 give outbox_events, in one migration. uuid is
-- TEXT in lowercase canonical form, jsonb TEXT holding JSON, every time column
-- INTEGER epoch milliseconds. SQLite has no autovacuum settings to tune:
-- deleted pages are reused in place.
CREATE TABLE billing_outbox_events (
    id            TEXT    PRIMARY KEY,
    event_tag     TEXT    NOT NULL,
    payload       TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    available_at  INTEGER NOT NULL,
    claimed_until INTEGER,
    attempts      INTEGER NOT NULL DEFAULT 0,
    processed_at  INTEGER,
    failed_at     INTEGER,
    last_error    TEXT,
    claim_token   TEXT,
    trace_context TEXT,
    claim_lease   INTEGER
);

-- The claim reads only pending rows, however many settled rows the table holds.
CREATE INDEX billing_outbox_events_pending_idx ON billing_outbox_events (created_at)
    WHERE processed_at IS NULL AND failed_at IS NULL;

-- Retention deletes processed rows by age without scanning the table.
CREATE INDEX billing_outbox_events_processed_idx ON billing_outbox_events (processed_at)
    WHERE processed_at IS NOT NULL;

-- The dead letter is listed without scanning the table.
CREATE INDEX billing_outbox_events_failed_idx ON billing_outbox_events (failed_at)
    WHERE failed_at IS NOT NULL;

-- +goose Down
DROP TABLE billing_outbox_events;

-- +goose Up
-- outbox_events on SQLite: the same columns as on PostgreSQL (contract section
-- 2). uuid is TEXT in lowercase canonical form, jsonb TEXT holding JSON, every
-- time column INTEGER epoch milliseconds.
CREATE TABLE outbox_events (
    id            TEXT    PRIMARY KEY,
    event_tag     TEXT    NOT NULL,
    payload       TEXT    NOT NULL,
    created_at    INTEGER NOT NULL,
    available_at  INTEGER NOT NULL,
    claimed_until INTEGER,
    attempts      INTEGER NOT NULL DEFAULT 0,
    processed_at  INTEGER,
    failed_at     INTEGER,
    last_error    TEXT
);

-- The claim reads only pending rows, however many settled rows the table holds.
CREATE INDEX outbox_events_pending_idx ON outbox_events (created_at)
    WHERE processed_at IS NULL AND failed_at IS NULL;

-- Retention deletes processed rows by age without scanning the table.
CREATE INDEX outbox_events_processed_idx ON outbox_events (processed_at)
    WHERE processed_at IS NOT NULL;

-- The dead letter is listed without scanning the table.
CREATE INDEX outbox_events_failed_idx ON outbox_events (failed_at)
    WHERE failed_at IS NOT NULL;

-- +goose Down
DROP TABLE outbox_events;

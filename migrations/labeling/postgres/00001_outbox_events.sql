-- +goose Up
-- outbox_events is owned by infra/outbox. Every time column is epoch milliseconds.
CREATE TABLE outbox_events (
    id            uuid    PRIMARY KEY,
    event_tag     text    NOT NULL,
    payload       jsonb   NOT NULL,
    created_at    bigint  NOT NULL,
    available_at  bigint  NOT NULL,
    claimed_until bigint,
    attempts      integer NOT NULL DEFAULT 0,
    processed_at  bigint,
    failed_at     bigint,
    last_error    text
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

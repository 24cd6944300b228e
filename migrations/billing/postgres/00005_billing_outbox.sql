-- +goose Up
-- billing_outbox_events is billing's own outbox (issue 28), owned by
-- infra/outbox (its store built with outbox.WithTable("billing_outbox_events")):
-- a row per call to the outside world that an apply decided on, appended in the
-- apply's transaction, relayed as labeling's outbox_events is. Its own table,
-- not outbox_events, because both services may share one database (contract
-- section 2): their tables never overlap. Exactly what labeling's migrations
-- 00001, 00003, 00004 and 00005 give outbox_events, in one migration (see them
-- for the reasons; migrations' TestBillingOutboxIsLabelingOutbox holds the two
-- to the same columns, indexes and storage settings). Every time column is
-- epoch milliseconds.
CREATE TABLE billing_outbox_events (
    id            uuid    PRIMARY KEY,
    event_tag     text    NOT NULL,
    payload       jsonb   NOT NULL,
    created_at    bigint  NOT NULL,
    available_at  bigint  NOT NULL,
    claimed_until bigint,
    attempts      integer NOT NULL DEFAULT 0,
    processed_at  bigint,
    failed_at     bigint,
    last_error    text,
    -- The claim's token: settles match id and token only (00003).
    claim_token   uuid,
    -- The appending request's W3C trace context, NULL when untraced (00004).
    trace_context jsonb,
    -- The lease in ms of the claim that holds the row (00005).
    claim_lease   bigint
) WITH (
    -- A queue table: vacuumed after a fixed number of dead tuples and inserts
    -- whatever its size, no cost delay, and room on each page for HOT updates
    -- (00003).
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 10000,
    fillfactor = 85
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

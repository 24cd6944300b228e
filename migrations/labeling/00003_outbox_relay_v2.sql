-- +goose Up
-- Relay v2 (issue 9): a claim token, a wake-up for every replica, and autovacuum
-- settings fit for a queue table.

-- Every claim sets a fresh random token; settles and releases match the row by
-- primary key and token. A token is never reused (requeue clears it, the next
-- claim sets a new one), so a relay that stalled past its lease can never settle
-- a newer claim of the same row, even after a requeue reset attempts to 0.
-- Additive and nullable: rows written before this migration have none, and old
-- relays (which fence on attempts) keep working during a rolling deploy.
ALTER TABLE outbox_events ADD COLUMN claim_token uuid;

-- Wake-up of every relay, in the appending transaction: NOTIFY is delivered at
-- commit and dropped on rollback, so Append stays atomic with the caller's
-- transaction. One notification a statement (and PostgreSQL folds identical
-- ones within a transaction); the relays poll anyway, so a lost one only costs
-- a poll interval.
-- +goose StatementBegin
CREATE FUNCTION outbox_events_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_events', '');
    RETURN NULL;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER outbox_events_notify
    AFTER INSERT ON outbox_events
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_events_notify();

-- A queue table is mostly dead tuples: every row is inserted, updated two or
-- three times and deleted by retention a week later. The defaults vacuum when
-- 20% of the table is dead, which for a table holding a week of processed rows
-- (millions) means almost never, and every claim then reads the dead index
-- entries of settled rows. Instead:
-- * vacuum after a fixed 5,000 dead tuples (scale factor 0): a few seconds of
--   work at 1,000 events/s, whatever the table's size;
-- * also after 10,000 inserts, so that pages are marked all-visible and frozen in
--   small steps instead of one large anti-wraparound pass;
-- * no cost delay: a pass over a few thousand tuples is short, and a throttled
--   one falls behind a busy relay;
-- * analyze after 10,000 changed rows (the plans do not depend on it; see
--   explain_test.go, but the backlog estimates in EXPLAIN stay honest);
-- * fillfactor 85: the claim and the retry update only columns that no index
--   holds, so with room on the page they are HOT updates that add no index entry.
ALTER TABLE outbox_events SET (
    autovacuum_vacuum_scale_factor = 0,
    autovacuum_vacuum_threshold = 5000,
    autovacuum_vacuum_insert_scale_factor = 0,
    autovacuum_vacuum_insert_threshold = 10000,
    autovacuum_vacuum_cost_delay = 0,
    autovacuum_analyze_scale_factor = 0,
    autovacuum_analyze_threshold = 10000,
    fillfactor = 85
);

-- +goose Down
ALTER TABLE outbox_events RESET (
    autovacuum_vacuum_scale_factor,
    autovacuum_vacuum_threshold,
    autovacuum_vacuum_insert_scale_factor,
    autovacuum_vacuum_insert_threshold,
    autovacuum_vacuum_cost_delay,
    autovacuum_analyze_scale_factor,
    autovacuum_analyze_threshold,
    fillfactor
);
DROP TRIGGER outbox_events_notify ON outbox_events;
DROP FUNCTION outbox_events_notify();
ALTER TABLE outbox_events DROP COLUMN claim_token;

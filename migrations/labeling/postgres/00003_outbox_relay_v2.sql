-- +goose Up
-- Relay v2 (issue 9): a claim token and autovacuum settings fit for a queue table.
-- (No NOTIFY trigger: a NOTIFY in the appending transaction holds a database-wide
-- lock through that transaction's commit, which serialises every appending
-- commit: measured 2,400 → 350 inserts/s with 8 clients. The relays broadcast
-- their wake-ups after the commit instead; see infra/outbox/listen.go.)

-- Every claim sets a fresh random token; settles and releases match the row by
-- primary key and token. A token is never reused (requeue clears it, the next
-- claim sets a new one), so a relay that stalled past its lease can never settle
-- a newer claim of the same row, even after a requeue reset attempts to 0.
-- Additive and nullable: rows written before this migration have none, and old
-- relays (which fence on attempts) keep working during a rolling deploy.
ALTER TABLE outbox_events ADD COLUMN claim_token uuid;

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
ALTER TABLE outbox_events DROP COLUMN claim_token;

-- +goose Up
-- Per-row lease (issue 18): the lease, in ms, of the claim that holds the row, as
-- its claimer was configured. A claim lying more than twice its own lease in the
-- future (its relay's clock ran ahead) is reclaimable; judged by the reader's
-- lease instead, a replica with a shorter OUTBOX_LEASE would take the live claims
-- of one with a longer lease (a rolling change of the setting) and dispatch them
-- twice at once. Additive and nullable: a claim without one (written before this
-- migration, or by an older labeling during a rolling deploy) is reclaimed only
-- when it expires.
ALTER TABLE outbox_events ADD COLUMN claim_lease bigint;

-- +goose Down
ALTER TABLE outbox_events DROP COLUMN claim_lease;

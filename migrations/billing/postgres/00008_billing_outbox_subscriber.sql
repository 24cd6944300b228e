-- +goose Up
-- billing_outbox_events keeps exactly outbox_events' columns (infra/outbox
-- runs the same statements on both; TestBillingOutboxIsLabelingOutbox): the
-- two columns of labeling's 00006, one row per delivery. Billing has one
-- subscriber (the provider), so every row keeps subscriber '' and event_id
-- NULL; additive, no rewrite.
ALTER TABLE billing_outbox_events ADD COLUMN subscriber text NOT NULL DEFAULT '';
ALTER TABLE billing_outbox_events ADD COLUMN event_id uuid;

-- +goose Down
ALTER TABLE billing_outbox_events DROP COLUMN event_id;
ALTER TABLE billing_outbox_events DROP COLUMN subscriber;

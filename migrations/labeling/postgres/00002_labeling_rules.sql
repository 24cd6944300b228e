-- +goose Up
-- Times are epoch milliseconds, like every time column in this project.
CREATE TABLE labeling_rules (
    org_id     uuid        NOT NULL,
    id         uuid        PRIMARY KEY,
    name       text        NOT NULL,
    pattern    text        NOT NULL,
    label      text        NOT NULL,
    active     boolean     NOT NULL DEFAULT false,
    created_at bigint      NOT NULL,
    updated_at bigint      NOT NULL
);

-- Listing is per org in id order (keyset pagination).
CREATE INDEX labeling_rules_org_id_idx ON labeling_rules (org_id, id);

-- +goose Down
DROP TABLE labeling_rules;

-- +goose Up
-- active is INTEGER 0/1; times are epoch milliseconds.
CREATE TABLE labeling_rules (
    org_id     TEXT    NOT NULL,
    id         TEXT    PRIMARY KEY,
    name       TEXT    NOT NULL,
    pattern    TEXT    NOT NULL,
    label      TEXT    NOT NULL,
    active     INTEGER NOT NULL DEFAULT 0,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);

-- Listing is per org in id order (keyset pagination): lowercase canonical
-- UUID text sorts as the UUID's bytes do.
CREATE INDEX labeling_rules_org_id_idx ON labeling_rules (org_id, id);

-- +goose Down
DROP TABLE labeling_rules;

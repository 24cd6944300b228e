package labeling

import (
	"context"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
)

// pgStore is Store on one PostgreSQL transaction.
type pgStore struct {
	tx     postgres.Tx
	events outbox.Appender[postgres.Tx]
}

// Insert stores r unless a rule with its id exists, and reports whether it did.
// ON CONFLICT DO NOTHING waits for a concurrent insert of the same id to commit or
// roll back, so under READ COMMITTED exactly one of several racing creates inserts
// and the others see its committed row in their next statement.
func (s pgStore) Insert(ctx context.Context, r Rule) (Rule, bool, error) {
	rows, _ := s.tx.Query(ctx, `
		INSERT INTO labeling_rules (`+ruleColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
		ON CONFLICT (id) DO NOTHING
		RETURNING `+ruleColumns,
		r.OrgID.UUID(), r.ID.UUID(), r.Name, r.Pattern, r.Label, r.Active, r.CreatedAt, r.UpdatedAt)
	stored, err := pgx.CollectExactlyOneRow(rows, pgScanRule)
	if errors.Is(err, pgx.ErrNoRows) {
		return Rule{}, false, nil
	}
	if err != nil {
		return Rule{}, false, fmt.Errorf("insert rule: %w", err)
	}
	return stored, true, nil
}

// ByID returns the rule with id whatever its org, for telling a replay from a
// conflict; found is false when there is none.
func (s pgStore) ByID(ctx context.Context, id RuleID) (Rule, bool, error) {
	rows, _ := s.tx.Query(ctx, `SELECT `+ruleColumns+` FROM labeling_rules WHERE id = $1`, id.UUID())
	return pgOneRule(rows)
}

// Get returns org's rule id, or a fault.NotFound when it does not exist or belongs
// to another org: the two are indistinguishable to the caller.
func (s pgStore) Get(ctx context.Context, org OrgID, id RuleID) (Rule, error) {
	rows, _ := s.tx.Query(ctx, `
		SELECT `+ruleColumns+` FROM labeling_rules WHERE org_id = $1 AND id = $2`,
		org.UUID(), id.UUID())
	r, found, err := pgOneRule(rows)
	if err != nil {
		return Rule{}, err
	}
	if !found {
		return Rule{}, errNotFound(id)
	}
	return r, nil
}

// List returns up to limit of org's rules with ids greater than after, in id
// order. Pass the nil UUID to start at the beginning: no rule has it.
func (s pgStore) List(ctx context.Context, org OrgID, after uuid.UUID, limit int) ([]Rule, error) {
	// One shape for the first and later pages keeps the (org_id, id) index usable
	// with a generic prepared plan, which an "$2 IS NULL OR" filter would not.
	rows, _ := s.tx.Query(ctx, `
		SELECT `+ruleColumns+` FROM labeling_rules
		WHERE org_id = $1 AND id > $2
		ORDER BY id
		LIMIT $3`,
		org.UUID(), after, limit)
	rules, err := pgx.CollectRows(rows, pgScanRule)
	if err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	return rules, nil
}

// SetActive moves org's rule id to the state active and reports whether it moved.
// It matches only a row in the other state, so of any number of concurrent calls
// exactly one changes it: the others wait on the row lock, re-check the condition
// against the committed row, and match nothing. updated_at never goes back, even
// when replicas' clocks disagree.
func (s pgStore) SetActive(ctx context.Context, org OrgID, id RuleID, active bool, now int64) (Rule, bool, error) {
	rows, _ := s.tx.Query(ctx, `
		UPDATE labeling_rules
		SET active = $3, updated_at = GREATEST(updated_at, $4)
		WHERE org_id = $1 AND id = $2 AND active <> $3
		RETURNING `+ruleColumns,
		org.UUID(), id.UUID(), active, now)
	return pgOneRule(rows)
}

func pgOneRule(rows pgx.Rows) (Rule, bool, error) {
	r, err := pgx.CollectExactlyOneRow(rows, pgScanRule)
	if errors.Is(err, pgx.ErrNoRows) {
		return Rule{}, false, nil
	}
	if err != nil {
		return Rule{}, false, fmt.Errorf("read rule: %w", err)
	}
	return r, true, nil
}

func pgScanRule(row pgx.CollectableRow) (Rule, error) {
	var r Rule
	var org, id uuid.UUID
	err := row.Scan(&org, &id, &r.Name, &r.Pattern, &r.Label, &r.Active, &r.CreatedAt, &r.UpdatedAt)
	r.OrgID, r.ID = OrgID{org}, RuleID{id}
	return r, err
}

// Append appends event in s's transaction.
func (s pgStore) Append(ctx context.Context, event outbox.Event) (uuid.UUID, error) {
	return outbox.Append(ctx, s.events, s.tx, event)
}

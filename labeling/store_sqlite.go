package labeling

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqlite"
)

// sqliteStore is Store on one SQLite transaction. A write transaction holds
// the write lock from its start (BEGIN IMMEDIATE), so racing creates and
// activations run one after another and each sees the last one's commit: the
// same outcomes as the PostgreSQL statements' row locks.
type sqliteStore struct {
	tx     sqlite.Tx
	events outbox.Appender[sqlite.Tx]
}

// Insert stores r unless its id exists (ON CONFLICT DO NOTHING returns no row).
func (s sqliteStore) Insert(ctx context.Context, r Rule) (Rule, bool, error) {
	row := s.tx.QueryRow(ctx, `
		INSERT INTO labeling_rules (`+ruleColumns+`)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
		ON CONFLICT (id) DO NOTHING
		RETURNING `+ruleColumns,
		r.OrgID.UUID(), r.ID.UUID(), r.Name, r.Pattern, r.Label, r.Active, r.CreatedAt, r.UpdatedAt)
	stored, found, err := sqliteOneRule(row)
	if err != nil {
		return Rule{}, false, fmt.Errorf("insert rule: %w", err)
	}
	return stored, found, nil
}

// ByID returns the rule with id whatever its org.
func (s sqliteStore) ByID(ctx context.Context, id RuleID) (Rule, bool, error) {
	return sqliteOneRule(s.tx.QueryRow(ctx,
		`SELECT `+ruleColumns+` FROM labeling_rules WHERE id = ?1`, id.UUID()))
}

// Get returns org's rule id, or ErrRuleNotFound.
func (s sqliteStore) Get(ctx context.Context, org OrgID, id RuleID) (Rule, error) {
	r, found, err := sqliteOneRule(s.tx.QueryRow(ctx,
		`SELECT `+ruleColumns+` FROM labeling_rules WHERE org_id = ?1 AND id = ?2`, org.UUID(), id.UUID()))
	if err != nil {
		return Rule{}, err
	}
	if !found {
		return Rule{}, errNotFound(id)
	}
	return r, nil
}

// List returns a page through labeling_rules_org_id_idx: lowercase canonical
// UUID text sorts as the UUIDs' bytes do, so the order is PostgreSQL's.
func (s sqliteStore) List(ctx context.Context, org OrgID, after uuid.UUID, limit int) ([]Rule, error) {
	rows, err := s.tx.Query(ctx, `
		SELECT `+ruleColumns+` FROM labeling_rules
		WHERE org_id = ?1 AND id > ?2
		ORDER BY id
		LIMIT ?3`,
		org.UUID(), after, limit)
	if err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	defer rows.Close()
	var rules []Rule
	for rows.Next() {
		r, err := sqliteScanRule(rows)
		if err != nil {
			return nil, fmt.Errorf("list rules: %w", err)
		}
		rules = append(rules, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list rules: %w", err)
	}
	return rules, nil
}

// SetActive matches only a row in the other state; updated_at never goes back.
func (s sqliteStore) SetActive(ctx context.Context, org OrgID, id RuleID, active bool, now int64) (Rule, bool, error) {
	return sqliteOneRule(s.tx.QueryRow(ctx, `
		UPDATE labeling_rules
		SET active = ?3, updated_at = max(updated_at, ?4)
		WHERE org_id = ?1 AND id = ?2 AND active <> ?3
		RETURNING `+ruleColumns,
		org.UUID(), id.UUID(), active, now))
}

func sqliteOneRule(row *sql.Row) (Rule, bool, error) {
	r, err := sqliteScanRule(row)
	if errors.Is(err, sql.ErrNoRows) {
		return Rule{}, false, nil
	}
	if err != nil {
		return Rule{}, false, fmt.Errorf("read rule: %w", err)
	}
	return r, true, nil
}

func sqliteScanRule(row interface{ Scan(...any) error }) (Rule, error) {
	var r Rule
	var org, id uuid.UUID
	err := row.Scan(&org, &id, &r.Name, &r.Pattern, &r.Label, &r.Active, &r.CreatedAt, &r.UpdatedAt)
	r.OrgID, r.ID = OrgID{org}, RuleID{id}
	return r, err
}

// Append appends event in s's transaction.
func (s sqliteStore) Append(ctx context.Context, event outbox.Event) (uuid.UUID, error) {
	return outbox.Append(ctx, s.events, s.tx, event)
}

package labeling

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
)

// Page limits of List.
const (
	DefaultPageSize = 50
	MaxPageSize     = 500
)

// Service holds the use cases. Each owns its transaction; a state change commits
// with its outbox event or not at all.
type Service struct {
	// inTx runs a use case's fn in a transaction of the database's dialect,
	// handing it the Store built on that transaction.
	inTx   runner
	nudger outbox.Nudger
}

// NewService returns the use cases over db (the DB infra/database opened),
// with the rules store and the outbox append of db's dialect, picked once
// here. nudger is woken after every commit that appended an event (the relay,
// or a test's counter). routes are the further subscribers (fan-out): each
// event is appended once for billing and once for every route of its type.
func NewService(db sqldb.DB, nudger outbox.Nudger, routes ...outbox.Route) *Service {
	return &Service{inTx: database.Pick(db, dialects(routes)), nudger: nudger}
}

// Create stores org's new rule n. created is true when this call stored it; when
// the same id was stored before with the same org and body it returns the stored
// row with created false (a replay); with another org or body it fails with a
// fault.Conflict whose reason is "rule_id_conflict".
func (s *Service) Create(ctx context.Context, org OrgID, n NewRule) (rule Rule, created bool, err error) {
	now := time.Now().UnixMilli()
	err = s.inTx(ctx, sqldb.TxOptions{}, func(tx Store) error {
		rule, created, err = tx.Insert(ctx, Rule{
			ID: n.ID, OrgID: org, Name: n.Name, Pattern: n.Pattern, Label: n.Label,
			CreatedAt: now, UpdatedAt: now,
		})
		if err != nil || created {
			return err
		}
		// The conflicting row is committed (ON CONFLICT waited for it) and this is
		// a new statement, so it is visible here. Rules are never deleted.
		existing, found, err := tx.ByID(ctx, n.ID)
		switch {
		case err != nil:
			return err
		case !found:
			return errors.New("create: conflicting rule not found after ON CONFLICT")
		case !existing.sameBody(org, n):
			return &fault.Error{Code: fault.Conflict, Reason: "rule_id_conflict",
				Message: "a rule with id " + n.ID.String() + " exists with another body or org"}
		}
		rule = existing
		return nil
	})
	if err != nil {
		return Rule{}, false, err
	}
	if created {
		rulesCreated.Inc()
	}
	return rule, created, nil
}

// Get returns org's rule id; fault.NotFound when absent or another org's.
func (s *Service) Get(ctx context.Context, org OrgID, id RuleID) (rule Rule, err error) {
	err = s.inTx(ctx, sqldb.TxOptions{ReadOnly: true}, func(tx Store) error {
		rule, err = tx.Get(ctx, org, id)
		return err
	})
	return rule, err
}

// Page is one page of a listing. Next is the id to pass as after for the next
// page, nil when this page is the last.
type Page struct {
	Rules []Rule
	Next  *RuleID
}

// List returns up to limit (1..MaxPageSize) of org's rules after the rule id after
// (nil for the first page), in id order.
func (s *Service) List(ctx context.Context, org OrgID, after *RuleID, limit int) (Page, error) {
	if limit < 1 || limit > MaxPageSize {
		return Page{}, fault.Errorf(fault.Invalid, "limit must be between 1 and %d", MaxPageSize)
	}
	from := uuid.Nil
	if after != nil {
		from = after.UUID()
	}
	var rules []Rule
	err := s.inTx(ctx, sqldb.TxOptions{ReadOnly: true}, func(tx Store) error {
		var err error
		// One row more than asked tells whether a next page exists, so a client
		// never fetches an empty last page.
		rules, err = tx.List(ctx, org, from, limit+1)
		return err
	})
	if err != nil {
		return Page{}, err
	}
	page := Page{Rules: rules}
	if len(rules) > limit {
		page.Rules = rules[:limit]
		next := rules[limit-1].ID
		page.Next = &next
	}
	return page, nil
}

// Activate makes org's rule id active. Only a change from inactive appends
// RuleActivated, in the same transaction; activating an active rule returns it
// unchanged and appends nothing. fault.NotFound when absent or another org's.
func (s *Service) Activate(ctx context.Context, org OrgID, id RuleID) (Rule, error) {
	rule, changed, err := s.setActive(ctx, org, id, true)
	if err != nil {
		return Rule{}, err
	}
	// Committed, not yet answered: a crash here must leave the event to the relay.
	if err := failpoint.Inject(failpoint.LabelingActivateAfterCommit); err != nil {
		return Rule{}, err
	}
	if changed {
		s.nudger.Nudge()
	}
	return rule, nil
}

// Deactivate is the mirror of Activate: only a change from active appends
// RuleDeactivated.
func (s *Service) Deactivate(ctx context.Context, org OrgID, id RuleID) (Rule, error) {
	rule, changed, err := s.setActive(ctx, org, id, false)
	if err != nil {
		return Rule{}, err
	}
	if changed {
		s.nudger.Nudge()
	}
	return rule, nil
}

func (s *Service) setActive(ctx context.Context, org OrgID, id RuleID, active bool) (rule Rule, changed bool, err error) {
	now := time.Now().UnixMilli()
	err = s.inTx(ctx, sqldb.TxOptions{}, func(tx Store) error {
		rule, changed, err = tx.SetActive(ctx, org, id, active, now)
		if err != nil {
			return err
		}
		if !changed {
			// Already in that state, absent, or another org's: read to tell which.
			rule, err = tx.Get(ctx, org, id)
			return err
		}
		var event outbox.Event = RuleActivated{OrgID: org.UUID(), RuleID: id.UUID()}
		if !active {
			event = RuleDeactivated{OrgID: org.UUID(), RuleID: id.UUID()}
		}
		_, err = tx.Append(ctx, event)
		return err
	})
	if err != nil {
		return Rule{}, false, err
	}
	if changed {
		stateChanges.WithLabelValues(stateName(active)).Inc()
	}
	return rule, changed, nil
}

func stateName(active bool) string {
	if active {
		return "active"
	}
	return "inactive"
}

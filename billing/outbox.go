package billing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqlite"
)

// OutboxTable is billing's own outbox (contract sections 2 and 10): a
// QuotaChanged row for every applied event that changed a quota, written in
// the apply's transaction and relayed to the provider (PROVIDER_URL).
const OutboxTable = "billing_outbox_events"

// QuotaChanged is the fact billing tells the outside world: org's quota is
// now ActiveRules, right after the event SourceEventID was applied. Its JSON
// is the payload of a billing_outbox_events row (contract section 10).
type QuotaChanged struct {
	OrgID         uuid.UUID `json:"orgId"`
	ActiveRules   int64     `json:"activeRules"`
	SourceEventID uuid.UUID `json:"sourceEventId"`
}

// QuotaChangedTag is QuotaChanged's event tag.
const QuotaChangedTag = "QuotaChanged"

// EventTag is "QuotaChanged".
func (QuotaChanged) EventTag() string { return QuotaChangedTag }

// Validate refuses a payload without its org or its source event: the relay
// dead-letters such a row without calling the provider.
func (q QuotaChanged) Validate() error {
	if q.OrgID == uuid.Nil || q.SourceEventID == uuid.Nil {
		return errors.New("orgId and sourceEventId are required")
	}
	return nil
}

// changesQuota reports whether applying e changes its org's quota, and so
// appends a QuotaChanged row.
func changesQuota(e Event) bool { return e.Value.Delta != 0 }

// outboxIDs are the ids of the QuotaChanged rows the events may append, one
// per event, fresh UUIDv7s as outbox.Append makes them, given out in event id
// order (so that the rows of one apply sort as their events do).
func outboxIDs(events []Event) []uuid.UUID {
	order := make([]int, len(events))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(events[a].ID[:], events[b].ID[:]) })
	ids := make([]uuid.UUID, len(events))
	for _, i := range order {
		ids[i] = uuid.Must(uuid.NewV7())
	}
	return ids
}

// quotaChanges are the QuotaChanged facts of applied (in event id order, the
// new events of one transaction), given each org's count after all of them:
// an event's count is its org's final count less the deltas of the org's later
// events. Events that change no quota have none.
func quotaChanges(applied []Event, final map[uuid.UUID]int64) []QuotaChanged {
	after := make(map[uuid.UUID]int64, len(final))
	for org, n := range final {
		after[org] = n
	}
	out := make([]QuotaChanged, len(applied))
	keep := make([]bool, len(applied))
	for i := len(applied) - 1; i >= 0; i-- {
		e := applied[i]
		if !changesQuota(e) {
			continue
		}
		out[i] = QuotaChanged{OrgID: e.Value.OrgID, ActiveRules: after[e.Value.OrgID], SourceEventID: e.ID}
		keep[i] = true
		after[e.Value.OrgID] -= e.Value.Delta
	}
	changes := out[:0]
	for i, c := range out {
		if keep[i] {
			changes = append(changes, c)
		}
	}
	return changes
}

// appendQuotaChanges appends a QuotaChanged row for each change in tx through
// store (billing_outbox_events on SQLite), created at now.
func appendQuotaChanges(ctx context.Context, store outbox.Appender[sqlite.Tx], tx sqlite.Tx, changes []QuotaChanged, now int64) error {
	for _, c := range changes {
		payload, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("encode %s: %w", QuotaChangedTag, err)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("new outbox id: %w", err)
		}
		row := outbox.NewRow{ID: id, Tag: QuotaChangedTag, Payload: payload, CreatedAt: now}
		if err := store.Append(ctx, tx, row); err != nil {
			return fmt.Errorf("append %s: %w", QuotaChangedTag, err)
		}
	}
	return nil
}

// appended is the inbox's Committed hook: the QuotaChanged rows of applied
// are committed, so they are counted in billing_outbox_events_appended_total
// and the relay, if billing runs one, is woken (and, with OUTBOX_NOTIFY, the
// relays of the other replicas), as after outbox.Append.
func appended(nudger outbox.Nudger) func([]Event) {
	return func(applied []Event) {
		n := 0
		for _, e := range applied {
			if changesQuota(e) {
				n++
			}
		}
		if n == 0 {
			return
		}
		outbox.CountAppended(OutboxTable, QuotaChangedTag, n)
		if nudger != nil {
			nudger.Nudge()
		}
	}
}

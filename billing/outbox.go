package billing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/outbox"
)

// OutboxTable is billing's own outbox (contract sections 2 and 10): a
// QuotaChanged row for every applied event that changed a quota, written in
// the apply's transaction and relayed to the provider (PROVIDER_URL).
const OutboxTable = "billing_outbox_events"

// QuotaChanged is the fact billing tells the outside world: org's quota is
// now ActiveRules, right after the event SourceEventID was applied, its
// Version-th change. Its JSON is the payload of a billing_outbox_events row
// (contract section 10).
//
// Version orders an org's changes: 1 for the org's first change, one more
// with each, taken under the quota row's lock in the statement (PostgreSQL)
// or transaction (SQLite) that makes the change, so the highest version
// carries the org's latest count whatever replicas, group apply or retries
// did. The row's occurredAt cannot order them: it is read before the lock,
// and two replicas may commit in the other order (docs/calling-the-outside-world.md).
type QuotaChanged struct {
	OrgID         uuid.UUID `json:"orgId"`
	ActiveRules   int64     `json:"activeRules"`
	SourceEventID uuid.UUID `json:"sourceEventId,omitzero"` // absent on a catch-up's row (CatchUp)
	Version       int64     `json:"version"`
}

// QuotaChangedTag is QuotaChanged's event tag.
const QuotaChangedTag = "QuotaChanged"

// EventTag is "QuotaChanged".
func (QuotaChanged) EventTag() string { return QuotaChangedTag }

// Validate refuses a payload without its org, or without its source event
// unless it is a catch-up's row (version 1, no source: CatchUp): the relay
// dead-letters such a row without calling the provider.
func (q QuotaChanged) Validate() error {
	if q.OrgID == uuid.Nil || (q.SourceEventID == uuid.Nil && q.Version != 1) {
		return errors.New("orgId and sourceEventId are required (sourceEventId may be absent only at version 1, a catch-up's row)")
	}
	return nil
}

// NoProvider, supplied to an app with Module, says billing calls no provider
// (PROVIDER_URL unset): the Service appends no QuotaChanged rows
// (WithoutQuotaChanged).
type NoProvider struct{}

// WithoutQuotaChanged makes the Service append no QuotaChanged row: for a
// billing that calls no provider (PROVIDER_URL unset), whose rows no relay
// would ever deliver, so that billing_outbox_events does not grow one
// pending row per quota change for ever. The org's version still advances
// with each change, so a provider configured later orders what it then gets
// after what it may have got before; the rows already pending from a time
// with a provider stay, delivered once one is configured again.
func WithoutQuotaChanged() Option {
	return func(s *settings) { s.noRows = true }
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

// orgCount is an org's quota row as an upsert returned it.
type orgCount struct{ activeRules, version int64 }

// quotaChanges are the QuotaChanged facts of applied (in event id order, the
// new events of one transaction), given each org's count and version after
// all of them: an event's count is its org's final count less the deltas of
// the org's later events, its version the org's final version less the number
// of the org's later changing events. Events that change no quota have none.
func quotaChanges(applied []Event, final map[uuid.UUID]orgCount) []QuotaChanged {
	after := make(map[uuid.UUID]orgCount, len(final))
	for org, c := range final {
		after[org] = c
	}
	out := make([]QuotaChanged, len(applied))
	keep := make([]bool, len(applied))
	for i := len(applied) - 1; i >= 0; i-- {
		e := applied[i]
		if !changesQuota(e) {
			continue
		}
		c := after[e.Value.OrgID]
		out[i] = QuotaChanged{OrgID: e.Value.OrgID, ActiveRules: c.activeRules, SourceEventID: e.ID, Version: c.version}
		keep[i] = true
		after[e.Value.OrgID] = orgCount{activeRules: c.activeRules - e.Value.Delta, version: c.version - 1}
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
// store (billing_outbox_events), each as outbox.Append writes one (a fresh
// UUIDv7, created and available at now).
func appendQuotaChanges[TX any](ctx context.Context, store outbox.Appender[TX], tx TX, changes []QuotaChanged, now int64) error {
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

// insertQuotaChanged appends a QuotaChanged row for each change in tx
// (billing_outbox_events), each as outbox.Append writes one (a fresh UUIDv7,
// created and available at now), in one SQL for both dialects.
func insertQuotaChanged(ctx context.Context, tx inbox.Tx, changes []QuotaChanged, now int64) error {
	for _, c := range changes {
		payload, err := json.Marshal(c)
		if err != nil {
			return fmt.Errorf("encode %s: %w", QuotaChangedTag, err)
		}
		id, err := uuid.NewV7()
		if err != nil {
			return fmt.Errorf("new outbox id: %w", err)
		}
		_, err = tx.Exec(ctx, `INSERT INTO `+OutboxTable+` (id, event_tag, payload, created_at, available_at, attempts)
			VALUES ($1, $2, $3, $4, $4, 0)`, id, QuotaChangedTag, string(payload), now)
		if err != nil {
			return fmt.Errorf("append %s: %w", QuotaChangedTag, err)
		}
	}
	return nil
}

// appended is the inbox's Committed hook: the QuotaChanged rows of applied
// are committed, so they are counted in billing_outbox_events_appended_total
// and the relay, if billing runs one, is woken (and, with OUTBOX_NOTIFY, the
// relays of the other replicas), as after outbox.Append. Without rows (no
// provider) nothing was appended, and it does nothing.
func appended(nudger outbox.Nudger, rows bool) func([]Event) {
	if !rows {
		return nil
	}
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

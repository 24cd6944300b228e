package inbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/wire"
)

// The reason classes of ReplayReport.Stayed, each a record's reason prefix too.
const (
	StayedNoSuchRecord  = "no such record"
	StayedNoSignature   = "no signature stored (recorded before migration 00004)"
	StayedSignature     = "signature invalid under the current keys"
	StayedNotApplicable = "not applicable"
)

// replayPrefix starts the reason of a record a replay left, before the reason
// it was first recorded with, which it keeps.
const replayPrefix = "replay refused: "

// ReplayBatch is how many records a replay reads, applies and deletes at a
// time: a batch's payloads are what it holds in memory, and its apply and its
// delete are one transaction each.
const ReplayBatch = 500

// ReplayReport is what ReplayNATSFailed did.
type ReplayReport struct {
	// Records is how many were asked for: the ids given (an unknown id
	// included), or every record checked with ids nil.
	Records int
	// Replayed is how many were applied and their records deleted; one whose
	// event was applied before (its receipt) counts here too, applied nothing.
	Replayed int
	// Stayed counts the records left, by reason class (the Stayed* constants).
	Stayed map[string]int
	// Last is the id of the last record done (0: none): the records up to it
	// were checked, and those that passed applied and deleted, in committed
	// batches. A replay of every record that stopped resumes after it
	// (ReplayNATSFailedAfter).
	Last int64
}

// ReplayNATSFailed checks the records of the NATSFailed table again (ids, or
// every one when ids is nil) and applies those that now pass, exactly as a
// delivery: the Events-Signature under keys (EVENTS_TOKEN and, when set,
// EVENTS_TOKEN_PREVIOUS), then the envelope, Nats-Msg-Id and Decode (its
// late-delivery bound included), then the apply, which writes the receipt, so
// an event applied before is applied nothing more. It works in batches of
// ReplayBatch records in id order, each read, applied in one transaction, then
// its records' outcome committed in another: the passed ones deleted, the
// others left with their reason replaced by "replay refused: CLASS: why;
// recorded: ORIGINAL" (one written before migration 00004 has no signature to
// check and stays so). A crash between the two transactions leaves the
// batch's records, and the next replay finds their receipts, applies nothing
// and deletes them. An error (the database unavailable, ctx ended) stops it
// between batches or within one: the batches done stay done (Last says up to
// which record), the rest is left for the next run.
func (s *Inbox[V]) ReplayNATSFailed(ctx context.Context, keys [][]byte, ids []int64) (ReplayReport, error) {
	if ids == nil {
		return s.ReplayNATSFailedAfter(ctx, keys, 0, 0)
	}
	rep := ReplayReport{Stayed: map[string]int{}}
	if err := checkKeys(keys); err != nil {
		return rep, err
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids) // asked twice: one record, counted once
	for chunk := range slices.Chunk(ids, ReplayBatch) {
		records, err := s.d.store.NATSFailedByID(ctx, chunk)
		if err != nil {
			return rep, s.classify(err)
		}
		if unknown := len(chunk) - len(records); unknown > 0 {
			rep.Records += unknown
			rep.Stayed[StayedNoSuchRecord] += unknown
		}
		if err := s.replayBatch(ctx, keys, records, &rep); err != nil {
			return rep, err
		}
	}
	return rep, nil
}

// ReplayNATSFailedAfter is ReplayNATSFailed of every record with an id above
// after (0: every record), batch records at a time (0 or less: ReplayBatch):
// the resumption of a replay of every record that stopped after the record
// after (its ReplayReport.Last).
func (s *Inbox[V]) ReplayNATSFailedAfter(ctx context.Context, keys [][]byte, after int64, batch int) (ReplayReport, error) {
	rep := ReplayReport{Stayed: map[string]int{}}
	if err := checkKeys(keys); err != nil {
		return rep, err
	}
	if batch <= 0 {
		batch = ReplayBatch
	}
	for {
		if err := ctx.Err(); err != nil {
			return rep, s.classify(err)
		}
		records, err := s.d.store.OldestNATSFailed(ctx, after, batch)
		if err != nil {
			return rep, s.classify(err)
		}
		if len(records) == 0 {
			return rep, nil
		}
		if err := s.replayBatch(ctx, keys, records, &rep); err != nil {
			return rep, err
		}
		after = records[len(records)-1].ID
	}
}

// checkKeys refuses a replay without EVENTS_TOKEN.
func checkKeys(keys [][]byte) error {
	if len(keys) == 0 || len(keys[0]) == 0 {
		return errors.New("EVENTS_TOKEN: required to verify the records")
	}
	return nil
}

// replayBatch replays records (id order) and adds what it did to rep: the
// events of those that pass applied in one transaction, then, in another,
// the others' reasons rewritten and the passed ones deleted; rep.Last is the
// batch's last id once both committed.
func (s *Inbox[V]) replayBatch(ctx context.Context, keys [][]byte, records []NATSFailed, rep *ReplayReport) error {
	rep.Records += len(records)
	type stayed struct {
		f          NATSFailed
		class, why string
	}
	var left []stayed
	var events []Event[V]
	byEvent := map[uuid.UUID][]NATSFailed{} // the records of each event to apply
	for _, f := range records {
		e, class, why := s.replayCheck(keys, f)
		if class != "" {
			left = append(left, stayed{f, class, why})
			continue
		}
		if _, dup := byEvent[e.ID]; !dup {
			events = append(events, e)
		}
		byEvent[e.ID] = append(byEvent[e.ID], f)
	}
	refused, err := s.replayApply(ctx, events)
	if err != nil {
		return err
	}
	var done []int64
	for _, e := range events {
		for _, f := range byEvent[e.ID] {
			if why, ok := refused[e.ID]; ok {
				left = append(left, stayed{f, StayedNotApplicable, why})
				continue
			}
			done = append(done, f.ID)
		}
	}
	// Applied (or found applied): only now their records go; the reasons
	// first, the delete last (its trigger takes the tally's row lock).
	err = s.d.write(ctx, func(tx recordTx) error {
		for _, l := range left {
			reason := replayPrefix + l.class
			if l.why != "" {
				reason += ": " + l.why
			}
			reason = wire.Clip(strings.ToValidUTF8(reason+"; recorded: "+originalReason(l.f.Reason), "\uFFFD"), 1000)
			if err := tx.SetNATSFailedReason(ctx, l.f.ID, reason); err != nil {
				return err
			}
		}
		if len(done) == 0 {
			return nil
		}
		_, err := tx.DeleteNATSFailed(ctx, done...)
		return err
	})
	if err != nil {
		return s.classify(err)
	}
	rep.Replayed += len(done)
	for _, l := range left {
		rep.Stayed[l.class]++
	}
	rep.Last = records[len(records)-1].ID
	return nil
}

// replayCheck runs the checks of a delivery on f, in handleNATS's order: the
// event to apply, or the class and why of a record that stays.
func (s *Inbox[V]) replayCheck(keys [][]byte, f NATSFailed) (e Event[V], class, why string) {
	if f.Signature == nil {
		return e, StayedNoSignature, ""
	}
	if err := stream.VerifyAny(keys, f.Subject, f.MsgID, f.Payload, *f.Signature); err != nil {
		return e, StayedSignature, err.Error()
	}
	ev, err := recordEvent(f)
	if err != nil {
		return e, StayedNotApplicable, err.Error()
	}
	e, err = s.Decode(ev.ID, ev.Type, ev.OccurredAt, ev.Payload)
	if err != nil {
		return e, StayedNotApplicable, err.Error()
	}
	if f.MsgID != "" && f.MsgID != e.ID.String() {
		return e, StayedNotApplicable, "Nats-Msg-Id must equal the body's id"
	}
	return e, "", ""
}

// replayApply applies events (distinct ids) in one transaction, as a group
// apply does; when it fails for a reason other than an unavailable database
// (a defect one event may cause), each is applied alone, and one the consumer
// refuses (Invalid, NotImplemented) is returned in refused with why. Any other
// failure stops the replay.
func (s *Inbox[V]) replayApply(ctx context.Context, events []Event[V]) (refused map[uuid.UUID]string, err error) {
	refused = map[uuid.UUID]string{}
	if len(events) == 0 {
		return refused, nil
	}
	fresh, err := s.commit(ctx, events)
	if err == nil {
		for _, e := range events {
			s.countApply(e.Type, fresh[e.ID], nil)
		}
		return refused, nil
	}
	if len(events) == 1 || fault.CodeOf(err) == fault.Unavailable {
		if c := fault.CodeOf(err); len(events) == 1 && (c == fault.Invalid || c == fault.NotImplemented) {
			refused[events[0].ID] = err.Error()
			return refused, nil
		}
		return nil, err
	}
	for _, e := range events {
		applied, err := s.replayApply(ctx, []Event[V]{e})
		if err != nil {
			return nil, err
		}
		maps.Copy(refused, applied)
	}
	return refused, nil
}

// originalReason is the reason f was first recorded with, out of one a replay
// already rewrote.
func originalReason(reason string) string {
	if !strings.HasPrefix(reason, replayPrefix) {
		return reason
	}
	if _, orig, ok := strings.Cut(reason, "; recorded: "); ok {
		return orig
	}
	return reason
}

// String is the report's summary line, as `billing nats replay` prints it.
func (r ReplayReport) String() string {
	return fmt.Sprintf("replayed %d of %d records", r.Replayed, r.Records)
}

package inbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/web"
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

// ReplayReport is what ReplayNATSFailed did.
type ReplayReport struct {
	// Records is how many were asked for: the ids given (an unknown id
	// included), or every record there was with ids nil.
	Records int
	// Replayed is how many were applied and their records deleted; one whose
	// event was applied before (its receipt) counts here too, applied nothing.
	Replayed int
	// Stayed counts the records left, by reason class (the Stayed* constants).
	Stayed map[string]int
}

// ReplayNATSFailed checks the records of the NATSFailed table again (ids, or
// every one when ids is nil) and applies those that now pass, exactly as a
// delivery: the Events-Signature under keys (EVENTS_TOKEN and, when set,
// EVENTS_TOKEN_PREVIOUS), then the envelope, Nats-Msg-Id and Decode (its
// late-delivery bound included), then Apply, which writes the receipt, so an
// event applied before is applied nothing more. A record is deleted only after
// its Apply committed: a crash between the two leaves it, and the next replay
// finds the receipt, applies nothing and deletes it. A record that fails stays,
// its reason replaced by "replay refused: CLASS: why; recorded: ORIGINAL"; one
// written before migration 00004 has no signature to check and stays so. An
// error (the database unavailable, ctx ended) stops it where it was: what it
// applied stays applied, the rest is left for the next run.
func (s *Inbox[V]) ReplayNATSFailed(ctx context.Context, keys [][]byte, ids []int64) (ReplayReport, error) {
	if len(keys) == 0 || len(keys[0]) == 0 {
		return ReplayReport{}, errors.New("EVENTS_TOKEN: required to verify the records")
	}
	all, err := s.d.store.ListNATSFailed(ctx)
	if err != nil {
		return ReplayReport{}, s.classify(err)
	}
	rep := ReplayReport{Stayed: map[string]int{}}
	records := all
	if ids != nil {
		records = nil
		seen := map[int64]bool{}
		for _, id := range ids {
			if seen[id] {
				continue // asked twice: one record, counted once
			}
			seen[id] = true
			i := slices.IndexFunc(all, func(f NATSFailed) bool { return f.ID == id })
			if i < 0 {
				rep.Records++
				rep.Stayed[StayedNoSuchRecord]++
				continue
			}
			records = append(records, all[i])
		}
	}
	rep.Records += len(records)
	for _, f := range records {
		if err := ctx.Err(); err != nil {
			return rep, s.classify(err)
		}
		class, why, err := s.replayOne(ctx, keys, f)
		if err != nil {
			return rep, err
		}
		if class == "" {
			rep.Replayed++
			continue
		}
		rep.Stayed[class]++
		reason := replayPrefix + class
		if why != "" {
			reason += ": " + why
		}
		reason = wire.Clip(strings.ToValidUTF8(reason+"; recorded: "+originalReason(f.Reason), "\uFFFD"), 1000)
		if err := s.d.write(ctx, func(tx recordTx) error {
			return tx.SetNATSFailedReason(ctx, f.ID, reason)
		}); err != nil {
			return rep, s.classify(err)
		}
	}
	return rep, nil
}

// replayOne applies f if it passes, and deletes it: class "" then. Otherwise
// class names why it stays; err is a failure that stops the replay.
func (s *Inbox[V]) replayOne(ctx context.Context, keys [][]byte, f NATSFailed) (class, why string, err error) {
	if f.Signature == nil {
		return StayedNoSignature, "", nil
	}
	if err := stream.VerifyAny(keys, f.Subject, f.MsgID, f.Payload, *f.Signature); err != nil {
		return StayedSignature, err.Error(), nil
	}
	// The checks of handleNATS, in its order.
	var env wire.Envelope
	if err := web.Unmarshal(f.Payload, &env); err != nil {
		return StayedNotApplicable, "body is not a valid event envelope: " + err.Error(), nil
	}
	e, err := s.decode(env)
	if err != nil {
		return StayedNotApplicable, err.Error(), nil
	}
	if f.MsgID != "" && f.MsgID != e.ID.String() {
		return StayedNotApplicable, "Nats-Msg-Id must equal the body's id", nil
	}
	applied, err := s.Apply(ctx, e)
	s.countApply(e.Type, applied, err)
	if err != nil {
		if c := fault.CodeOf(err); c == fault.Invalid || c == fault.NotImplemented {
			return StayedNotApplicable, err.Error(), nil
		}
		return "", "", err
	}
	// Applied (or found applied): only now the record goes.
	if err := s.d.write(ctx, func(tx recordTx) error {
		return tx.DeleteNATSFailed(ctx, f.ID)
	}); err != nil {
		return "", "", s.classify(err)
	}
	return "", "", nil
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

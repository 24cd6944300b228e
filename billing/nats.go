package billing

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/web"
)

// Durable is the name of billing's consumer of the stream. Every billing replica
// pulls from this one consumer, so each message goes to one of them at a time.
const Durable = "billing"

// NATSConfig is what billing's intake of the stream needs.
type NATSConfig struct {
	// Key (EVENTS_TOKEN) verifies each message's Events-Signature.
	Key []byte
	// PreviousKey (EVENTS_TOKEN_PREVIOUS), when set, verifies it too: during a
	// rotation, messages labeling signed with the old token still apply.
	PreviousKey []byte
	// MaxDeliveries (NATS_MAX_DELIVERIES) bounds the deliveries of a message
	// that keeps failing (an unknown type, a defect): at that delivery it is
	// recorded in billing_nats_failed and terminated instead of retried for ever.
	// A failure to write the record (the database is down) still naks it. Zero
	// retries for ever.
	MaxDeliveries uint64
}

var signatureRejects = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "billing_nats_signature_rejected_total",
	Help: "Stream messages terminated unapplied because their Events-Signature was missing or wrong: someone other than labeling published on labeling.events.>, or a message was altered.",
})

func init() { prometheus.MustRegister(signatureRejects) }

// NATSHandler returns billing's handler of the stream's messages. It applies a
// message only if its Events-Signature verifies (stream.VerifyAny with cfg.Key
// and, when set, cfg.PreviousKey):
// one without, or with a wrong one, is recorded in billing_nats_failed with a
// reason naming the signature and terminated, never applied. A verified message
// goes through Apply, the use case of the HTTP intake: nil (ack) only after the
// commit, or for a redelivery that finds its receipt. A message no redelivery
// can apply (a malformed envelope, an invalid payload, a Nats-Msg-Id that is not
// the body's id) is recorded and terminated; if the record cannot be written the
// message is naked and comes back. A type without a handler and an unavailable
// database are naked, as the HTTP intake answers 501 and 503, until
// cfg.MaxDeliveries; then they are recorded and terminated, never applied.
func (s *Service) NATSHandler(cfg NATSConfig) (stream.Handler, error) {
	if len(cfg.Key) == 0 {
		return nil, errors.New("EVENTS_TOKEN: required to verify the stream's messages")
	}
	keys := [][]byte{cfg.Key}
	if len(cfg.PreviousKey) > 0 {
		keys = append(keys, cfg.PreviousKey)
	}
	return func(ctx context.Context, m stream.Message) error {
		if err := stream.VerifyAny(keys, m.Subject, m.MsgID, m.Data, m.Signature); err != nil {
			signatureRejects.Inc()
			return s.deadLetter(ctx, m, err.Error())
		}
		err := s.handleNATS(ctx, m)
		if err == nil || stream.IsTerminal(err) || cfg.MaxDeliveries == 0 || m.Delivered < cfg.MaxDeliveries {
			return err
		}
		return s.deadLetter(ctx, m, fmt.Sprintf("gave up after %d deliveries: %v", m.Delivered, err))
	}, nil
}

// handleNATS applies a message whose signature verified.
func (s *Service) handleNATS(ctx context.Context, m stream.Message) error {
	var env Envelope
	// The same rules as the HTTP intake (web.Unmarshal): exact names, no
	// duplicate, valid UTF-8, no NUL, one value.
	if err := web.Unmarshal(m.Data, &env); err != nil {
		s.countEvent(typeOther, OutcomeRejected)
		return s.deadLetter(ctx, m, "body is not a valid event envelope: "+err.Error())
	}
	e, err := s.decode(env)
	if err != nil {
		typ := typeOther
		if env.Type != nil {
			typ = *env.Type
		}
		s.countDecodeFailure(typ, err)
		if fault.CodeOf(err) == fault.NotImplemented {
			// Naked with a growing delay, so that a billing deployed with the
			// handler later applies it, until cfg.MaxDeliveries records it.
			return err
		}
		return s.deadLetter(ctx, m, err.Error())
	}
	if m.MsgID != "" && m.MsgID != e.ID.String() {
		s.countEvent(e.Type, OutcomeRejected)
		return s.deadLetter(ctx, m, "Nats-Msg-Id must equal the body's id")
	}
	applied, err := s.Apply(ctx, e)
	s.countApply(e.Type, applied, err)
	if err != nil {
		return err
	}
	// Committed; a crash here loses only the ack, and the redelivery that follows
	// finds the receipt.
	return failpoint.Inject(failpoint.BillingNATSAfterCommit)
}

// deadLetter records m with reason and returns the error that terminates it, or,
// when the record cannot be written, an ordinary error so the message comes back.
func (s *Service) deadLetter(ctx context.Context, m stream.Message, reason string) error {
	err := s.db.InTx(ctx, sqldb.TxOptions{}, func(tx sqldb.Tx) error {
		return s.store.InsertNATSFailed(ctx, tx, NATSFailed{
			StreamSeq: m.Sequence, StoredAt: storedAt(m), Subject: m.Subject, MsgID: m.MsgID, Payload: m.Data,
			Signature: &m.Signature,
			Reason:    clip(strings.ToValidUTF8(reason, "\uFFFD"), 1000), Deliveries: m.Delivered, FailedAt: time.Now().UnixMilli(),
		})
	})
	if err != nil {
		return s.classify(err)
	}
	return stream.Terminate(errors.New(reason))
}

// storedAt is when the stream stored m, in epoch ns; 0 when unknown.
func storedAt(m stream.Message) int64 {
	if m.Stored.IsZero() {
		return 0
	}
	return m.Stored.UnixNano()
}

// NATSFailed is one terminated message of billing_nats_failed.
type NATSFailed struct {
	// ID names the record (billing nats replay ID), in the order recorded.
	ID        int64
	StreamSeq uint64
	// StoredAt is when the stream stored the message (epoch ns): with StreamSeq
	// it names one message even across a recreated stream, whose sequences
	// restart at 1.
	StoredAt int64
	// Subject and MsgID hold the bytes as received, UTF-8 or not (bytea/BLOB
	// since migration 00004): a Go string carries any bytes.
	Subject string
	MsgID   string
	Payload []byte
	// Signature is the Events-Signature header as received ("" when absent),
	// so the record can be verified again; nil for a record written before
	// migration 00004, which stored none.
	Signature  *string
	Reason     string
	Deliveries uint64
	FailedAt   int64 // epoch ms
}

// ListNATSFailed returns every terminated message of db, in the order recorded.
func ListNATSFailed(ctx context.Context, db sqldb.DB) ([]NATSFailed, error) {
	return NewStore(db).ListNATSFailed(ctx)
}

// sigBytes is the signature column's value: NULL for none, bytes (possibly
// empty: an unsigned message) otherwise.
func sigBytes(s *string) any {
	if s == nil {
		return nil
	}
	return []byte(*s)
}

// sigString reads the signature column back: nil for NULL.
func sigString(b []byte) *string {
	if b == nil {
		return nil
	}
	s := string(b)
	return &s
}

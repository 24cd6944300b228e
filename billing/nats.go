package billing

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/stream"
)

// Durable is the name of billing's consumer of the stream. Every billing replica
// pulls from this one consumer, so each message goes to one of them at a time.
const Durable = "billing"

// HandleNATS applies one JetStream message through Apply, the same use case as the
// HTTP intake: it returns nil (ack) only after the commit, and for a redelivery
// that finds its receipt. A message no redelivery can apply (a malformed envelope,
// an invalid payload, a Nats-Msg-Id that is not the body's id) is recorded in
// billing_nats_failed with its reason and terminated; if the record cannot be
// written the message is naked and comes back. An unknown type and an unavailable
// database are naked, as the HTTP intake answers 501 and 503.
func (s *Service) HandleNATS(ctx context.Context, m stream.Message) error {
	var env Envelope
	dec := json.NewDecoder(bytes.NewReader(m.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		countEvent(typeOther, OutcomeRejected)
		return s.deadLetter(ctx, m, "body is not a valid event envelope: "+err.Error())
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		countEvent(typeOther, OutcomeRejected)
		return s.deadLetter(ctx, m, "body must hold a single JSON value")
	}
	e, err := env.Event()
	if err != nil {
		typ := typeOther
		if env.Type != nil {
			typ = *env.Type
		}
		if fault.CodeOf(err) == fault.NotImplemented {
			countEvent(typ, OutcomeUnknownType)
			return err // retried, with a growing delay, until billing knows the type
		}
		countEvent(typ, OutcomeRejected)
		return s.deadLetter(ctx, m, err.Error())
	}
	if m.MsgID != "" && m.MsgID != e.ID.String() {
		countEvent(e.Type, OutcomeRejected)
		return s.deadLetter(ctx, m, "Nats-Msg-Id must equal the body's id")
	}
	applied, err := s.Apply(ctx, e)
	if err != nil {
		countEvent(e.Type, OutcomeFailed)
		return err
	}
	if applied {
		countEvent(e.Type, OutcomeApplied)
	} else {
		countEvent(e.Type, OutcomeAlreadyApplied)
	}
	// Committed; a crash here loses only the ack, and the redelivery that follows
	// finds the receipt.
	return failpoint.Inject(failpoint.BillingNATSAfterCommit)
}

// deadLetter records m with reason and returns the error that terminates it, or,
// when the record cannot be written, an ordinary error so the message comes back.
func (s *Service) deadLetter(ctx context.Context, m stream.Message, reason string) error {
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		return s.store.InsertNATSFailed(ctx, tx, NATSFailed{
			StreamSeq: m.Sequence, Subject: m.Subject, MsgID: m.MsgID, Payload: m.Data,
			Reason: clip(reason, 1000), Deliveries: m.Delivered, FailedAt: time.Now().UnixMilli(),
		})
	})
	if err != nil {
		return classify(err)
	}
	return stream.Terminate(errors.New(reason))
}

// NATSFailed is one terminated message of billing_nats_failed.
type NATSFailed struct {
	StreamSeq  uint64
	Subject    string
	MsgID      string
	Payload    []byte
	Reason     string
	Deliveries uint64
	FailedAt   int64 // epoch ms
}

// InsertNATSFailed records a terminated message once per stream sequence.
func (Store) InsertNATSFailed(ctx context.Context, tx pgx.Tx, f NATSFailed) error {
	_, err := tx.Exec(ctx, `
		INSERT INTO billing_nats_failed (stream_seq, subject, msg_id, payload, reason, deliveries, failed_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7)
		ON CONFLICT (stream_seq) DO NOTHING`,
		int64(f.StreamSeq), f.Subject, f.MsgID, f.Payload, f.Reason, int64(f.Deliveries), f.FailedAt)
	if err != nil {
		return fmt.Errorf("insert nats failed: %w", err)
	}
	return nil
}

// ListNATSFailed returns every terminated message, oldest stream sequence first.
func ListNATSFailed(ctx context.Context, pool *pgxpool.Pool) ([]NATSFailed, error) {
	rows, err := pool.Query(ctx, `
		SELECT stream_seq, subject, msg_id, payload, reason, deliveries, failed_at
		FROM billing_nats_failed ORDER BY stream_seq`)
	if err != nil {
		return nil, fmt.Errorf("list nats failed: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (NATSFailed, error) {
		var f NATSFailed
		var seq, deliveries int64
		err := r.Scan(&seq, &f.Subject, &f.MsgID, &f.Payload, &f.Reason, &deliveries, &f.FailedAt)
		f.StreamSeq, f.Deliveries = uint64(seq), uint64(deliveries)
		return f, err
	})
}

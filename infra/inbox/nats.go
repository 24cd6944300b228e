package inbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/wire"
)

// NATSConfig is what an inbox's intake of the stream needs.
type NATSConfig struct {
	// Key (EVENTS_TOKEN) verifies each message's Events-Signature.
	Key []byte
	// PreviousKey (EVENTS_TOKEN_PREVIOUS), when set, verifies it too: during a
	// rotation, messages labeling signed with the old token still apply.
	PreviousKey []byte
	// MaxDeliveries (NATS_MAX_DELIVERIES) bounds the deliveries of a message
	// that keeps failing (an unknown type, a defect): at that delivery it is
	// recorded in the consumer's NATSFailed table and terminated instead of retried for ever.
	// A failure to write the record (the database is down) still naks it. Zero
	// retries for ever.
	MaxDeliveries uint64
	// MaxFailedRows and MaxFailedBytes (NATS_FAILED_MAX_ROWS,
	// NATS_FAILED_MAX_BYTES) bound the NATSFailed table (records, payload
	// bytes): after each record written past either, the oldest records whose
	// signature fails under Key and PreviousKey are dropped until within both;
	// a record that verifies is never dropped. Zero: no bound.
	MaxFailedRows, MaxFailedBytes int64
}

// The intake's bounds when set from the environment: NATS_MAX_DELIVERIES'
// default (with the nak delay doubling from 250ms to 30s, about 8 hours of
// redeliveries, long enough to ship a consumer that knows a new event type),
// and the NATSFailed table's (100000 records, 1 GiB of payloads); each Max is
// the largest NATSConfig.Validate accepts.
const (
	DefaultNATSMaxDeliveries  = 1000
	MaxNATSMaxDeliveries      = 1_000_000
	DefaultNATSFailedMaxRows  = 100_000
	MaxNATSFailedMaxRows      = 100_000_000
	DefaultNATSFailedMaxBytes = 1 << 30
	MaxNATSFailedMaxBytes     = 1 << 40
)

// Validate reports the first bound of c out of its range as "Field: what is
// wrong": Check with the fields' own names.
func (c NATSConfig) Validate() error { return c.Check(func(field string) string { return field }) }

// Check is Validate with each field named by name(field), for a caller that
// calls the settings otherwise.
func (c NATSConfig) Check(name func(field string) string) error {
	switch {
	case c.MaxDeliveries > MaxNATSMaxDeliveries:
		return fmt.Errorf("%s: %d is more than the maximum of %d", name("MaxDeliveries"), c.MaxDeliveries, MaxNATSMaxDeliveries)
	case c.MaxFailedRows < 0 || c.MaxFailedRows > MaxNATSFailedMaxRows:
		return fmt.Errorf("%s: %d is not within 0 to %d", name("MaxFailedRows"), c.MaxFailedRows, MaxNATSFailedMaxRows)
	case c.MaxFailedBytes < 0 || c.MaxFailedBytes > MaxNATSFailedMaxBytes:
		return fmt.Errorf("%s: %d is not within 0 to %d", name("MaxFailedBytes"), c.MaxFailedBytes, MaxNATSFailedMaxBytes)
	}
	return nil
}

// NATSHandler returns the consumer's handler of the stream's messages. It applies a
// message only if its Events-Signature verifies (stream.VerifyAny with cfg.Key
// and, when set, cfg.PreviousKey):
// one without, or with a wrong one, is recorded in the NATSFailed table with a
// reason naming the signature and terminated, never applied. A verified message
// goes through Apply, the use case of the HTTP intake: nil (ack) only after the
// commit, or for a redelivery that finds its receipt. A message no redelivery
// can apply (a malformed envelope, an invalid payload, a Nats-Msg-Id that is not
// the body's id) is recorded and terminated; if the record cannot be written the
// message is naked and comes back. A type without a handler and an unavailable
// database are naked, as the HTTP intake answers 501 and 503, until
// cfg.MaxDeliveries; then they are recorded and terminated, never applied.
func (s *Inbox[V]) NATSHandler(cfg NATSConfig) (stream.Handler, error) {
	return s.natsHandler(cfg, nil)
}

// natsHandler is NATSHandler, with onVerify called before each signature its
// prune verifies.
func (s *Inbox[V]) natsHandler(cfg NATSConfig, onVerify func()) (stream.Handler, error) {
	if len(cfg.Key) == 0 {
		return nil, errors.New("EVENTS_TOKEN: required to verify the stream's messages")
	}
	keys := [][]byte{cfg.Key}
	if len(cfg.PreviousKey) > 0 {
		keys = append(keys, cfg.PreviousKey)
	}
	b := &bound{rows: cfg.MaxFailedRows, bytes: cfg.MaxFailedBytes, keys: keys, onVerify: onVerify}
	return func(ctx context.Context, m stream.Message) error {
		signed, f, err := natsSigned(m)
		if err != nil {
			// No signature can be checked without the attributes it covers.
			s.countEvent(TypeOther, OutcomeRejected)
			err = s.deadLetter(ctx, m, signed, err.Error(), false)
		} else if verr := stream.VerifyAny(keys, m.Subject, m.MsgID, signed, m.Signature); verr != nil {
			s.m.signatureRejects.Inc()
			err = s.deadLetter(ctx, m, signed, verr.Error(), false)
		} else {
			err = s.handleNATS(ctx, m, signed, f)
			if err != nil && !stream.IsTerminal(err) && cfg.MaxDeliveries != 0 && m.Delivered >= cfg.MaxDeliveries {
				err = s.deadLetter(ctx, m, signed, fmt.Sprintf("gave up after %d deliveries: %v", m.Delivered, err), true)
			}
		}
		if stream.IsTerminal(err) {
			// Recorded: keep the table within its bound. A failure here is
			// logged, never the message's: its record is written.
			s.prune(ctx, b)
		}
		return err
	}, nil
}

// handleNATS applies a message of format f whose signature verified;
// signed is what its record keeps.
func (s *Inbox[V]) handleNATS(ctx context.Context, m stream.Message, signed []byte, f format) error {
	// The same rules as the HTTP intake (web.Unmarshal): exact names, an
	// unknown top-level member ignored but a field's name in another case
	// refused, no duplicate, valid UTF-8, no NUL, one value.
	ev, err := natsEvent(m, f)
	if err != nil {
		s.countEvent(TypeOther, OutcomeRejected)
		return s.deadLetter(ctx, m, signed, err.Error(), true)
	}
	e, err := s.Decode(ev.ID, ev.Type, ev.OccurredAt, ev.Payload)
	if err != nil {
		s.decodeFailed(ctx, ev.ID, ev.Type, err)
		if fault.CodeOf(err) == fault.NotImplemented {
			// Naked with a growing delay, so that a billing deployed with the
			// handler later applies it, until cfg.MaxDeliveries records it.
			return err
		}
		return s.deadLetter(ctx, m, signed, err.Error(), true)
	}
	if m.MsgID != "" && m.MsgID != e.ID.String() {
		s.countEvent(e.Type, OutcomeRejected)
		return s.deadLetter(ctx, m, signed, "Nats-Msg-Id must equal the body's id", true)
	}
	applied, err := s.Apply(ctx, e)
	s.countApply(e.Type, applied, err)
	if err != nil {
		return err
	}
	// Committed; a crash here loses only the ack, and the redelivery that follows
	// finds the receipt.
	return inject(s.c.Failpoints.NATSAfterCommit)
}

// deadLetter records m with payload (what its signature covers: natsSigned),
// reason, and whether its signature verified, and
// returns the error that terminates it, or, when the record cannot be
// written, an ordinary error so the message comes back.
func (s *Inbox[V]) deadLetter(ctx context.Context, m stream.Message, payload []byte, reason string, verified bool) error {
	err := s.d.write(ctx, func(tx recordTx) error {
		return tx.InsertNATSFailed(ctx, NATSFailed{
			StreamSeq: m.Sequence, StoredAt: storedAt(m), Subject: m.Subject, MsgID: m.MsgID, Payload: payload,
			Signature: &m.Signature, Verified: verified,
			Reason: wire.Clip(strings.ToValidUTF8(reason, "\uFFFD"), 1000), Deliveries: m.Delivered, FailedAt: time.Now().UnixMilli(),
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

// NATSFailed is one terminated message of a consumer's NATSFailed table.
type NATSFailed struct {
	// ID names the record (as `billing nats replay ID` takes it), in the order recorded.
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
	Signature *string
	// Verified is whether the signature verified when the message was
	// recorded (under the keys of then). The bound never drops a verified
	// record; it verifies an unverified one again before it drops it.
	Verified   bool
	Reason     string
	Deliveries uint64
	FailedAt   int64 // epoch ms
}

// ListNATSFailed returns every terminated message, in the order recorded,
// payloads included: for tests and small tables. A listing pages through
// PageNATSFailed instead.
func (s *Inbox[V]) ListNATSFailed(ctx context.Context) ([]NATSFailed, error) {
	return s.d.store.ListNATSFailed(ctx)
}

// PageNATSFailed returns up to limit records with an id above after, in the
// order recorded, without their payload and signature: one page of a
// listing, whose cost is the page's, not the table's.
func (s *Inbox[V]) PageNATSFailed(ctx context.Context, after int64, limit int) ([]NATSFailed, error) {
	return s.d.store.PageNATSFailed(ctx, after, limit)
}

// bound is a handler's bound on the NATSFailed table, and its pruning state.
type bound struct {
	rows, bytes int64
	keys        [][]byte

	onVerify func() // called before each signature prune verifies (tests)

	mu         sync.Mutex // one prune at a time per handler
	dropped    int64      // since the last log line
	lastLogged time.Time
}

// pruneBatch is how many unverified records prune reads at a time.
const pruneBatch = 100

// prune drops, oldest first, records whose signature fails under b.keys until
// the table is within b (or only verified records are left). Its cost is
// what it drops, not the table: the size is the tally the table's triggers
// keep, and it reads only records not verified when recorded, oldest first,
// through their partial index. Each is verified again before it is dropped
// (a record of before migration 00007, or one signed with a key added since):
// one that passes is marked verified, so it is read at most once.
func (s *Inbox[V]) prune(ctx context.Context, b *bound) {
	if b.rows <= 0 && b.bytes <= 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	defer s.logDropped(b)
	rows, bytes, err := s.d.store.NATSFailedSize(ctx)
	if err != nil {
		s.logger.Warn(s.c.NATSFailed+" bound not checked", "error", err)
		return
	}
	over := func() bool { return (b.rows > 0 && rows > b.rows) || (b.bytes > 0 && bytes > b.bytes) }
	var after int64
	for over() {
		batch, err := s.d.store.OldestUnverifiedNATSFailed(ctx, after, pruneBatch)
		if err != nil {
			s.logger.Warn(s.c.NATSFailed+" bound not kept", "error", err)
			return
		}
		if len(batch) == 0 {
			return // only records that verify are left: never dropped
		}
		var verified, drop []int64
		for _, f := range batch {
			if !over() {
				break
			}
			after = f.ID
			if b.onVerify != nil {
				b.onVerify()
			}
			if f.Signature != nil && stream.VerifyAny(b.keys, f.Subject, f.MsgID, f.Payload, *f.Signature) == nil {
				verified = append(verified, f.ID)
				continue
			}
			drop = append(drop, f.ID)
			rows, bytes = rows-1, bytes-int64(len(f.Payload))
		}
		// The marks first, the delete last: the delete's trigger takes the
		// tally's row lock, held until the commit, after every other lock.
		var dropped int64
		if err := s.d.write(ctx, func(tx recordTx) error {
			if len(verified) > 0 {
				if err := tx.MarkNATSFailedVerified(ctx, verified); err != nil {
					return err
				}
			}
			if len(drop) > 0 {
				var err error
				dropped, err = tx.DeleteNATSFailed(ctx, drop...)
				return err
			}
			return nil
		}); err != nil {
			s.logger.Warn(s.c.NATSFailed+" bound not kept", "error", err)
			return
		}
		// Another replica may have dropped some of them first: only the
		// records this delete removed are counted.
		s.m.failedDropped.Add(float64(dropped))
		b.dropped += dropped
	}
}

// logDropped logs the records dropped since the last line, at most once a minute.
func (s *Inbox[V]) logDropped(b *bound) {
	if b.dropped > 0 && time.Since(b.lastLogged) >= time.Minute {
		s.logger.Warn(s.c.NATSFailed+" past its bound: dropped records whose signature failed, oldest first",
			"dropped", b.dropped, "max_rows", b.rows, "max_bytes", b.bytes)
		b.dropped, b.lastLogged = 0, time.Now()
	}
}

// Record writes f to the consumer's NATSFailed table once (keyed by its
// StreamSeq and StoredAt), as the NATS handler records a message it
// terminates: for a transport of the team's own that dead-letters the same
// way, and for tests.
func (s *Inbox[V]) Record(ctx context.Context, f NATSFailed) error {
	return s.d.write(ctx, func(tx recordTx) error { return tx.InsertNATSFailed(ctx, f) })
}

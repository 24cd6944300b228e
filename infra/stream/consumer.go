package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/acme/outboxpair/infra/stopbudget"
)

// Message is one delivery of a stream message to a consumer's handler.
type Message struct {
	Subject   string
	MsgID     string // the Nats-Msg-Id header: the outbox row id
	Signature string // the Events-Signature header, for Verify
	Data      []byte // the body: the delivery envelope, a CloudEvent's payload or a structured CloudEvent
	// Header is the message's headers (ce- attributes in binary content
	// mode, Content-Type in structured mode; nil when it has none).
	Header nats.Header
	// Sequence is the stream sequence: unique within the stream, but restarting
	// at 1 if the stream is deleted and recreated.
	Sequence uint64
	// Stored is when the stream stored the message (ns precision): with
	// Sequence, it tells a redelivery from another message of a recreated stream.
	Stored    time.Time
	Delivered uint64 // 1 on the first delivery
}

// Handler handles one message. nil acks it; an error marked with Terminate ends
// it for good (the handler has already recorded it where an operator sees it);
// any other error naks it with a delay that grows with its deliveries.
type Handler func(ctx context.Context, m Message) error

type terminal struct{ err error }

func (e *terminal) Error() string { return "terminate: " + e.err.Error() }
func (e *terminal) Unwrap() error { return e.err }

// Terminate marks err as one no redelivery can fix: the consumer terms the message.
func Terminate(err error) error { return &terminal{err: err} }

// IsTerminal reports whether err was marked with Terminate.
func IsTerminal(err error) bool {
	var t *terminal
	return errors.As(err, &t)
}

// ConsumerConfig is one durable pull consumer of the stream.
type ConsumerConfig struct {
	URL     string        // NATS_URL
	Creds   string        // NATS_CREDS: a credentials file, or empty
	Durable string        // the consumer's name, e.g. "billing"; one per consuming team
	AckWait time.Duration // an unacked delivery is redelivered after this; 30s when zero
	// NakBase and NakMax bound the delay of a nak: NakBase after the first
	// delivery, doubling, capped at NakMax. 250ms and 30s when zero.
	NakBase, NakMax time.Duration
	// Workers is how many messages are handled at once, each acked on its own
	// after its handler returned; 8 when zero. Billing's Apply commits once per
	// message, so one at a time caps the consumer at one commit's latency.
	Workers int
	Batch   int // messages pulled ahead of the handlers; 2 × Workers when zero
	// GaugeEvery is how often the backlog gauges (nats_consumer_pending_messages,
	// nats_consumer_oldest_unacked_age_seconds) are read from the server; 15s
	// when zero.
	GaugeEvery time.Duration
	// Types are the event types the consumer handles (billing's: its
	// handlers'); empty is every type. The durable filters their subjects,
	// labeling.events.<Type> (Filter: one subject a type on NATS 2.10 or
	// later; on 2.9 one type only, several taking every subject), so the
	// stream neither delivers nor keeps for it a type it does not handle; a
	// message of another type that reaches it anyway (2.9, or a filter kept
	// from before) is acked unhandled.
	Types []string
}

// ConsumerStopShare is a consumer's share of the stop budget (contract
// section 5: billing's NATS consumer, 8s): waiting for the handlers of the
// messages in flight, then closing. The app that runs a Consumer declares it
// (stopbudget.Module) around the hook that stops it.
var ConsumerStopShare = stopbudget.Share{Name: "nats-consumer", Timeout: 8 * time.Second}

// DefaultAckWait is AckWait when zero (NATS_ACK_WAIT's default);
// MaxAckWait the longest Validate accepts.
const (
	DefaultAckWait = 30 * time.Second
	MaxAckWait     = 24 * time.Hour
)

// Validate reports an AckWait out of its range as "AckWait: what is wrong".
func (c ConsumerConfig) Validate() error {
	switch {
	case c.AckWait < 0:
		return fmt.Errorf("AckWait: %s must not be negative", c.AckWait)
	case c.AckWait > MaxAckWait:
		return fmt.Errorf("AckWait: %s is more than the maximum of %s", c.AckWait, MaxAckWait)
	}
	return nil
}

func (c ConsumerConfig) withDefaults() ConsumerConfig {
	if c.AckWait <= 0 {
		c.AckWait = DefaultAckWait
	}
	if c.NakBase <= 0 {
		c.NakBase = 250 * time.Millisecond
	}
	if c.NakMax <= 0 {
		c.NakMax = 30 * time.Second
	}
	if c.Workers <= 0 {
		c.Workers = 8
	}
	if c.Batch <= 0 {
		c.Batch = 2 * c.Workers
	}
	if c.GaugeEvery <= 0 {
		c.GaugeEvery = 15 * time.Second
	}
	return c
}

// JetStreamConfig is the durable consumer the Consumer creates or updates on
// NATS 2.10 or later: every message of the stream from the first that its
// filter takes (Filter of Types), explicit acks, unlimited deliveries (a
// message ends by an ack or a term, never by a count the server keeps
// silently). The Consumer and labeling's Publisher adapt the filter to the
// server they reach (Filter, and on 2.9 an existing durable's own).
func (c ConsumerConfig) JetStreamConfig() jetstream.ConsumerConfig {
	c = c.withDefaults()
	subjects, _ := Filter(c.Types, "2.10.0")
	return withFilter(jetstream.ConsumerConfig{
		Durable:       c.Durable,
		Description:   "durable pull consumer of " + Name,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       c.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: 1000,
	}, subjects)
}

// Consumer runs one durable pull consumer: it creates or updates it (retrying
// until the stream exists), pulls messages and hands them to Workers handlers at
// once, acking each only after its handler returned nil. Messages are not
// ordered: the stream's events are not (the outbox's relay does not order them
// either), and the handler's receipt makes each one count once.
type Consumer struct {
	cfg    ConsumerConfig
	handle Handler
	logger *slog.Logger

	nc     *nats.Conn
	cancel context.CancelFunc
	done   chan struct{}
	gauges chan struct{} // closed when gaugeLoop has ended

	takes  map[string]bool          // Subject of each of cfg.Types; nil takes every subject
	filter atomic.Pointer[[]string] // the durable's filter as the server last reported it
	noted  map[string]bool          // the loop's notes on the filter, each logged once
}

// NewConsumer returns a consumer of cfg that hands messages to handle.
func NewConsumer(cfg ConsumerConfig, handle Handler, logger *slog.Logger) (*Consumer, error) {
	if cfg.URL == "" {
		return nil, errors.New("NATS_URL: not set")
	}
	if cfg.Durable == "" {
		return nil, errors.New("stream: a consumer needs a durable name")
	}
	c := &Consumer{cfg: cfg.withDefaults(), handle: handle, logger: logger.With("consumer", cfg.Durable), noted: map[string]bool{}}
	for _, t := range cfg.Types {
		if c.takes == nil {
			c.takes = map[string]bool{}
		}
		c.takes[Subject(t)] = true
	}
	return c, nil
}

// Filter is the durable's filter as the server reported it when the
// consumer last created or updated it (Applied), nil before that.
func (c *Consumer) Filter() []string {
	if f := c.filter.Load(); f != nil {
		return *f
	}
	return nil
}

// Start connects (or keeps trying in the background) and starts the loop.
func (c *Consumer) Start(context.Context) error {
	nc, err := connect(ConnectConfig{URL: c.cfg.URL, Creds: c.cfg.Creds}, c.cfg.Durable, c.logger)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("jetstream: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.nc, c.cancel, c.done = nc, cancel, make(chan struct{})
	c.gauges = make(chan struct{})
	go c.loop(ctx, js)
	go c.gaugeLoop(ctx, nc, js)
	return nil
}

// Stop ends the loop: the messages being handled finish (each handler is bounded
// by AckWait); messages pulled ahead but not handled are redelivered after
// AckWait. It waits until ctx ends at most.
func (c *Consumer) Stop(ctx context.Context) error {
	if c.cancel == nil {
		return nil
	}
	c.cancel()
	var err error
	select {
	case <-c.done:
	case <-ctx.Done():
		err = fmt.Errorf("consumer %s: stop: %w", c.cfg.Durable, ctx.Err())
	}
	select {
	case <-c.gauges:
	case <-ctx.Done():
	}
	c.nc.Close()
	return err
}

// loop keeps one continuous pull open (the library's message iterator: it keeps
// pull requests outstanding, watches the server's idle heartbeats and pulls
// again after a reconnect or a leader change), and recreates the consumer and
// the iterator whenever the iterator ends with an error.
func (c *Consumer) loop(ctx context.Context, js jetstream.JetStream) {
	work := make(chan jetstream.Msg)
	var wg sync.WaitGroup
	for range c.cfg.Workers {
		wg.Go(func() {
			for msg := range work {
				c.process(msg)
			}
		})
	}
	defer func() {
		close(work)
		wg.Wait() // the messages in hand finish before Stop returns
		close(c.done)
	}()
	failures := 0
	fail := func(what string, err error) bool {
		failures++
		if failures == 1 {
			c.logger.Warn("nats consumer "+what+" failed, retrying", "err", err.Error())
		}
		return sleep(ctx, backoff(failures))
	}
	for ctx.Err() == nil {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		cons, err := c.createOrUpdate(cctx, js)
		cancel()
		if err != nil {
			if !fail("create", err) {
				return
			}
			continue
		}
		it, err := cons.Messages(jetstream.PullMaxMessages(c.cfg.Batch), jetstream.PullHeartbeat(time.Second),
			jetstream.PullExpiry(5*time.Second))
		if err != nil {
			if !fail("pull", err) {
				return
			}
			continue
		}
		c.logger.Info("nats consumer ready", "stream", Name, "filter", c.Filter())
		for {
			msg, err := it.Next(jetstream.NextContext(ctx))
			if err != nil {
				it.Stop()
				if ctx.Err() != nil {
					return
				}
				if !fail("pull", err) {
					return
				}
				break
			}
			if failures > 0 {
				c.logger.Info("nats consumer recovered", "failures", failures)
				failures = 0
			}
			select {
			case work <- msg:
			case <-ctx.Done():
				it.Stop()
				return // pulled, not handled: redelivered after AckWait
			}
		}
	}
}

// createOrUpdate creates the durable, or updates it to the configuration
// (durableConfig: the filter the server's version can apply), and keeps the
// filter the server reports it applied: what the durable takes is the
// server's answer, not what was asked.
func (c *Consumer) createOrUpdate(ctx context.Context, js jetstream.JetStream) (jetstream.Consumer, error) {
	version := c.nc.ConnectedServerVersion()
	jc, note, err := durableConfig(ctx, js, c.cfg, version)
	if err != nil {
		return nil, err
	}
	if note.msg != "" && !c.noted[note.msg] {
		c.noted[note.msg] = true
		level := slog.LevelInfo
		if note.keep {
			level = slog.LevelWarn
		}
		c.logger.Log(ctx, level, "nats consumer filter", "stream", Name, "types", c.cfg.Types, "note", note.msg)
	}
	cons, err := js.CreateOrUpdateConsumer(ctx, Name, jc)
	if err != nil {
		return nil, err
	}
	applied := Applied(cons.CachedInfo().Config)
	c.filter.Store(&applied)
	if want := Applied(jc); !slices.Equal(applied, want) {
		// A server that dropped what it did not understand: say what it does.
		c.logger.Warn("nats consumer filter not applied as sent", "stream", Name, "sent", want, "applied", applied,
			"server", version)
	}
	return cons, nil
}

// process hands msg to the handler under a bound of AckWait (past it the server
// redelivers anyway) and settles it by the outcome.
func (c *Consumer) process(msg jetstream.Msg) {
	m := Message{Subject: msg.Subject(), MsgID: msg.Headers().Get(nats.MsgIdHdr),
		Signature: msg.Headers().Get(SignatureHeader), Data: msg.Data(), Header: msg.Headers()}
	if meta, err := msg.Metadata(); err == nil {
		m.Sequence, m.Stored, m.Delivered = meta.Sequence.Stream, meta.Timestamp, meta.NumDelivered
	}
	if c.takes != nil && !c.takes[m.Subject] {
		// A type this consumer does not handle, on a durable that takes it
		// anyway (several types on NATS 2.9, or a filter kept from before):
		// it is not this consumer's, as a filter would have said.
		if aerr := msg.Ack(); aerr != nil {
			c.logger.Warn("nats ack failed", "seq", m.Sequence, "msg_id", m.MsgID, "err", aerr.Error())
		}
		consumed.WithLabelValues(c.cfg.Durable, ConsumeSkipped).Inc()
		return
	}
	// The redelivery clock starts now, not when the message was pulled ahead.
	_ = msg.InProgress()
	// Not the loop's context: Stop lets the message in hand finish, so a handler
	// is never cut between its commit and its ack for nothing.
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.AckWait)
	ctx, span := consumeSpan(ctx, msg, m, c.cfg.Durable) // nil, at no cost, with tracing off
	err := c.safeHandle(ctx, m)
	endSpan(span, err)
	cancel()
	switch {
	case err == nil:
		if aerr := msg.Ack(); aerr != nil {
			// The commit stands; the redelivery that follows is the handler's to absorb.
			c.logger.WarnContext(ctx, "nats ack failed", "seq", m.Sequence, "msg_id", m.MsgID, "err", aerr.Error())
		}
		consumed.WithLabelValues(c.cfg.Durable, ConsumeAcked).Inc()
	case IsTerminal(err):
		c.logger.ErrorContext(ctx, "nats message terminated", "seq", m.Sequence, "msg_id", m.MsgID, "subject", m.Subject, "err", err.Error())
		_ = msg.Term()
		consumed.WithLabelValues(c.cfg.Durable, ConsumeTerminated).Inc()
	default:
		delay := c.nakDelay(m.Delivered)
		c.logger.WarnContext(ctx, "nats message naked", "seq", m.Sequence, "msg_id", m.MsgID, "delivered", m.Delivered,
			"delay_ms", delay.Milliseconds(), "err", err.Error())
		_ = msg.NakWithDelay(delay)
		consumed.WithLabelValues(c.cfg.Durable, ConsumeNaked).Inc()
	}
}

func (c *Consumer) safeHandle(ctx context.Context, m Message) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("handler panic: %v", r)
		}
	}()
	return c.handle(ctx, m)
}

// nakDelay is the delay after delivery n failed: NakBase doubling, capped at NakMax.
func (c *Consumer) nakDelay(n uint64) time.Duration {
	if n < 1 {
		n = 1
	}
	d := c.cfg.NakBase << min(n-1, 20)
	if d <= 0 || d > c.cfg.NakMax {
		d = c.cfg.NakMax
	}
	return d
}

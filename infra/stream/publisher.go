package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/acme/outboxpair/infra/delivery"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/wire"
)

// PublisherConfig is what Labeling's publisher needs from its configuration.
type PublisherConfig struct {
	URL      string // NATS_URL; several servers separated by commas
	Creds    string // NATS_CREDS: a credentials file, or empty
	Replicas int    // NATS_REPLICAS: replicas of the stream
	// DuplicateWindow (NATS_DUPLICATE_WINDOW) is how long the broker remembers a
	// Nats-Msg-Id: a republish of a row within it is acked as a duplicate and not
	// stored again.
	DuplicateWindow time.Duration
	// Key (EVENTS_TOKEN) signs every message (SignatureHeader).
	Key []byte
	// Format (EVENTS_FORMAT) is how each message is written: the envelope
	// of contract section 4 as its body (wire.FormatEnvelope, also when
	// empty), or a CloudEvent in binary content mode, its attributes in ce-
	// headers as the NATS protocol binding says and the payload its body
	// (wire.FormatCloudEvents).
	Format wire.Format
	// Consumers (NATS_CONSUMERS) are the durables the stream keeps every message
	// for: the publisher creates each one that does not exist before it publishes
	// anything, since an interest stream does not store a message no consumer is
	// there to want. Billing's "billing" first.
	Consumers []string
	// ConsumerTypes (NATS_CONSUMER_<NAME>_TYPES) are the event types labeling
	// creates each durable of Consumers with, when it is missing: its filter
	// (Filter). A durable absent here takes every type. Labeling never
	// changes an existing durable (its own service owns it): which subjects a
	// durable takes is what the server reports of it.
	ConsumerTypes map[string][]string
	// CheckEvery is how often the stream and the consumers are checked again
	// (a deleted durable is recreated); 30s when zero.
	CheckEvery time.Duration
	// Retention is how long the outbox keeps a published row
	// (OUTBOX_PROCESSED_RETENTION), which DuplicateWindow must not exceed: a
	// republish after the row is gone is not one; 0 leaves it unchecked.
	Retention time.Duration
}

// The publisher's defaults (NATS_REPLICAS, NATS_DUPLICATE_WINDOW) and
// JetStream's most replicas.
const (
	DefaultReplicas = 1
	MaxReplicas     = 5
	// DefaultDuplicateWindow is longer than the lease (5m) plus the longest
	// retry delay (15m) plus a handler timeout (30s) of the relay's defaults,
	// the longest a row can wait before it is published again after a publish
	// whose ack was lost or whose settle never happened.
	DefaultDuplicateWindow = 30 * time.Minute
)

// Validate reports the first setting of c out of its range as "Field: what
// is wrong": Replicas at most JetStream's MaxReplicas, DuplicateWindow within
// Retention when that is set, types only for a durable of Consumers.
func (c PublisherConfig) Validate() error {
	switch {
	case c.Replicas > MaxReplicas:
		return fmt.Errorf("%s: %d is more than JetStream's %d", "Replicas", c.Replicas, MaxReplicas)
	case c.DuplicateWindow < 0:
		return fmt.Errorf("DuplicateWindow: %s must not be negative", c.DuplicateWindow)
	case c.Retention > 0 && c.DuplicateWindow > c.Retention:
		return fmt.Errorf("DuplicateWindow: %s is longer than Retention (%s), which is how long a published row is kept",
			c.DuplicateWindow, c.Retention)
	}
	for durable := range c.ConsumerTypes {
		if !slices.Contains(c.Consumers, durable) {
			return fmt.Errorf("ConsumerTypes: types given for %s, which is not one of Consumers", durable)
		}
	}
	return nil
}

// StreamConfig is the stream Labeling creates or updates at start. Interest
// retention keeps a message until every consumer of the stream has acked or
// terminated it, however long that takes, and removes it then: no age limit
// drops what a consumer has not had yet (a work queue would hand each message to
// one consumer only, which ends fan-out). Were a size limit ever set, a full
// stream refuses new messages (the rows wait in the outbox) instead of
// discarding old ones.
func (c PublisherConfig) StreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        Name,
		Description: "Labeling's outbox events; Nats-Msg-Id is the outbox row id",
		Subjects:    []string{Subjects},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.InterestPolicy,
		Discard:     jetstream.DiscardNew,
		Replicas:    c.Replicas,
		Duplicates:  c.DuplicateWindow,
	}
}

// Publisher publishes outbox rows to the stream. Start connects (or keeps trying
// in the background) and creates or updates the stream and its consumers in the
// background; it never fails because NATS is unreachable. Until the stream is
// known to keep messages until consumed (interest retention, every durable of
// Consumers present), Publish refuses, so each row waits in the outbox rather
// than going to a stream that could drop it. It is safe for concurrent use.
type Publisher struct {
	cfg    PublisherConfig
	logger *slog.Logger

	nc      *nats.Conn
	js      jetstream.JetStream
	ready   atomic.Bool           // the stream and every durable of cfg.Consumers were seen as they must be
	down    atomic.Int64          // unix ns when Publish first found the connection down, 0 while up
	blocked atomic.Pointer[error] // why not ready, for Publish's error
	checked chan struct{}         // closed when the first check has ended, ready or not
	once    sync.Once             // closes checked
	kick    chan struct{}         // asks the stream loop to check the stream again
	// durables are confirm's reads of the durables after each ack, shared
	// among the publishes in flight.
	durables durableReads

	mu        sync.Mutex
	instances map[string]instance // each durable of cfg.Consumers as last seen by ensure
	noted     map[string]bool     // notes on the durables' filters, each logged once
	cancel    context.CancelFunc
	wg        sync.WaitGroup
}

// instance is one incarnation of a durable: its creation time tells it from a
// durable of the same name deleted and made again, and boundary is the stream's
// last sequence read after the incarnation was seen to exist, so a message
// stored at a greater sequence was stored while it existed, if it still exists
// after the message's ack.
type instance struct {
	created  time.Time
	boundary uint64
}

// ErrRetention is why Publish refuses when the stream exists with another
// retention than interest and the server cannot change it in place (NATS before
// 2.10): the operator's move, which the error spells out.
var ErrRetention = errors.New("stream " + Name + " exists without interest retention, and the server cannot change it in place; " +
	"it could drop events no consumer has had yet, so labeling does not publish to it (rows wait in the outbox): " +
	"wait until every consumer has nothing pending (nats consumer info " + Name + " billing), " +
	"then delete the stream (nats stream rm " + Name + "); labeling recreates it with interest retention")

// NewPublisher returns a publisher for cfg (Replicas 0 is DefaultReplicas);
// it refuses a cfg that Validate refuses, and does not connect until Start.
func NewPublisher(cfg PublisherConfig, logger *slog.Logger) (*Publisher, error) {
	if cfg.URL == "" {
		return nil, errors.New("NATS_URL: required with EVENTS_TRANSPORT=nats")
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = DefaultReplicas
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	if cfg.DuplicateWindow <= 0 {
		return nil, errors.New("NATS_DUPLICATE_WINDOW: must be positive")
	}
	if len(cfg.Key) == 0 {
		return nil, errors.New("EVENTS_TOKEN: required to sign the stream's messages")
	}
	if len(cfg.Consumers) == 0 {
		return nil, errors.New("NATS_CONSUMERS: at least one durable (billing) must be kept for")
	}
	if cfg.CheckEvery <= 0 {
		cfg.CheckEvery = 30 * time.Second
	}
	p := &Publisher{cfg: cfg, logger: logger, kick: make(chan struct{}, 1), checked: make(chan struct{})}
	p.durables.read = p.readDurables
	p.block(errors.New("not checked yet"))
	return p, nil
}

// Start connects and starts the loop that creates or updates the stream.
func (p *Publisher) Start(context.Context) error {
	nc, err := connect(ConnectConfig{URL: p.cfg.URL, Creds: p.cfg.Creds}, "labeling", p.logger)
	if err != nil {
		return err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return fmt.Errorf("jetstream: %w", err)
	}
	p.nc, p.js = nc, js
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	p.wg.Add(1)
	go p.ensureLoop(ctx)
	p.kickStream()
	return nil
}

// Stop ends the stream loop and closes the connection. Publishes in flight fail
// and their rows are released by the relay's own stop.
func (p *Publisher) Stop(ctx context.Context) error {
	if p.cancel == nil {
		return nil
	}
	p.cancel()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	p.nc.Close()
	return nil
}

func (p *Publisher) kickStream() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

func (p *Publisher) block(err error) {
	p.ready.Store(false)
	p.blocked.Store(&err)
}

// ensureLoop checks the stream and its consumers whenever kicked (at start, and
// when a publish finds no stream) and every CheckEvery, retrying with backoff
// until the server answers.
func (p *Publisher) ensureLoop(ctx context.Context) {
	defer p.wg.Done()
	tick := time.NewTicker(p.cfg.CheckEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		case <-tick.C:
		}
		for n := 1; ; n++ {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := p.ensure(cctx)
			cancel()
			if err == nil {
				p.once.Do(func() { close(p.checked) })
				break
			}
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, ErrRetention) || !p.ready.Load() {
				p.block(err) // Publish's error says why
			}
			p.once.Do(func() { close(p.checked) })
			switch {
			case errors.Is(err, ErrRetention):
				if n == 1 {
					p.logger.Error("nats stream refused", "stream", Name, "err", err.Error())
				}
			case n == 1:
				p.logger.Warn("nats stream not ready, retrying in the background", "stream", Name, "err", err.Error())
			}
			if !sleep(ctx, backoff(n)) {
				return
			}
		}
	}
}

// ensure creates or updates the stream, then creates each durable of Consumers
// that does not exist, and only then lets Publish through: a message published
// to an interest stream before its consumer exists would not be kept for it.
func (p *Publisher) ensure(ctx context.Context) error {
	if _, err := p.js.CreateOrUpdateStream(ctx, p.cfg.StreamConfig()); err != nil {
		// A server before 2.10 cannot turn the limits stream of an earlier
		// version into an interest one.
		if st, serr := p.js.Stream(ctx, Name); serr == nil && st.CachedInfo().Config.Retention != jetstream.InterestPolicy {
			return fmt.Errorf("%w (the update: %w)", ErrRetention, err)
		}
		return err
	}
	seen := map[string]time.Time{}
	for _, durable := range p.cfg.Consumers {
		types := p.cfg.ConsumerTypes[durable]
		want, narrowed := Filter(types, p.nc.ConnectedServerVersion())
		c, err := p.js.Consumer(ctx, Name, durable)
		if err == nil {
			seen[durable] = c.CachedInfo().Created
			if have := Applied(c.CachedInfo().Config); types != nil && !slices.Equal(have, want) {
				p.note(fmt.Sprintf("durable %s takes %s, not the %s of its types: labeling leaves an existing durable as it is "+
					"(its own service owns it), and settles by what it takes", durable, strings.Join(have, ","), strings.Join(want, ",")))
			}
			continue
		}
		if !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("consumer %s: %w", durable, err)
		}
		if !narrowed {
			p.note(fmt.Sprintf("durable %s is made to take every subject: NATS %s has no FilterSubjects (2.10 and later) "+
				"for its several types", durable, p.nc.ConnectedServerVersion()))
		}
		// Create, never update: the consumer's own service owns its settings.
		c, err = p.js.CreateConsumer(ctx, Name, withFilter(ConsumerConfig{Durable: durable}.JetStreamConfig(), want))
		if err != nil && !errors.Is(err, jetstream.ErrConsumerExists) {
			return fmt.Errorf("create consumer %s: %w", durable, err)
		}
		if err != nil { // made meanwhile by someone else: read it
			if c, err = p.js.Consumer(ctx, Name, durable); err != nil {
				return fmt.Errorf("consumer %s: %w", durable, err)
			}
		}
		seen[durable] = c.CachedInfo().Created
		p.logger.Info("nats consumer created, so the stream keeps every message of its filter for it", "stream", Name,
			"consumer", durable, "filter", Applied(c.CachedInfo().Config))
	}
	// Read after every durable was seen: a message stored at a greater
	// sequence was stored after each of these incarnations existed.
	st, err := p.js.Stream(ctx, Name)
	if err != nil {
		return err
	}
	last := st.CachedInfo().State.LastSeq
	p.mu.Lock()
	if p.instances == nil {
		p.instances = map[string]instance{}
	}
	for durable, created := range seen {
		if old, ok := p.instances[durable]; !ok || !old.created.Equal(created) {
			p.instances[durable] = instance{created: created, boundary: last}
		}
	}
	p.mu.Unlock()
	if !p.ready.Load() {
		p.logger.Info("nats stream ready", "stream", Name, "replicas", p.cfg.Replicas,
			"duplicate_window", p.cfg.DuplicateWindow.String(), "consumers", p.cfg.Consumers)
	}
	p.ready.Store(true)
	return nil
}

// note logs msg the first time only: a fact about the durables that holds
// until an operator changes it, checked every CheckEvery.
func (p *Publisher) note(msg string) {
	p.mu.Lock()
	if p.noted == nil {
		p.noted = map[string]bool{}
	}
	first := !p.noted[msg]
	p.noted[msg] = true
	p.mu.Unlock()
	if first {
		p.logger.Warn("nats consumer filter", "stream", Name, "note", msg)
	}
}

// Publish publishes m to labeling.events.<tag> with Nats-Msg-Id = the row id and
// its Events-Signature, and returns nil only on the broker's ack: the message is stored (or was stored
// before, which the ack reports as a duplicate, a success). A refusal that
// only waits for something with an end (the stream or a durable being made, a
// lost connection, an id in the duplicate window: see offline and confirm) is
// marked outbox.Wait and spends no attempt; every other failure is an
// ordinary error the relay retries after its durable delay.
func (p *Publisher) Publish(ctx context.Context, m outbox.Message) error {
	if p.js == nil {
		return errors.New("nats publisher not started")
	}
	if !p.ready.Load() {
		// A relay's first claims come as soon as the service starts, before
		// the first check of the stream has had its answers: wait for that
		// check (within the attempt's own deadline) rather than spend an
		// attempt, and a durable retry delay, on "not checked yet".
		select {
		case <-p.checked:
		case <-ctx.Done():
		}
	}
	if d, offline := p.offline(); offline {
		publishes.WithLabelValues(PublishFailed).Inc()
		return outbox.Wait(fmt.Errorf("publish %s %s: not connected to NATS", m.Tag, m.ID), d)
	}
	if !p.ready.Load() {
		// Nothing was sent: the row waits for the stream loop (a durable being
		// made again, the server not answering yet, a stream the operator must
		// replace) without spending an attempt on it.
		publishes.WithLabelValues(PublishFailed).Inc()
		return outbox.Wait(fmt.Errorf("publish %s %s: stream %s not ready: %w", m.Tag, m.ID, Name, *p.blocked.Load()), notReadyWait)
	}
	msg, err := p.message(m)
	if err != nil {
		return outbox.Permanent(fmt.Errorf("encode %s %s: %w", m.Tag, m.ID, err))
	}
	ctx, span := publishSpan(ctx, msg, m) // nil, at no cost, with tracing off
	if p.cfg.Format == wire.FormatCloudEvents {
		for _, h := range delivery.TraceAttributes(ctx) {
			msg.Header[h[0]] = []string{h[1]}
		}
	}
	ack, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(m.ID.String()), jetstream.WithExpectStream(Name))
	endSpan(span, err)
	if err != nil {
		publishes.WithLabelValues(PublishFailed).Inc()
		err = fmt.Errorf("publish %s %s: %w", m.Tag, m.ID, err)
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
			errors.Is(err, jetstream.ErrStreamNotFound) {
			// Deleted, or not created yet: make it again, and its consumers
			// before anything is published to it. Nothing was stored; the row
			// waits for the stream loop as it does while not ready.
			p.block(err)
			p.kickStream()
			return outbox.Wait(err, notReadyWait)
		}
		if d, offline := p.offline(); offline {
			// The connection was lost under the publish: the message was
			// stored or not, and the republish settles it either way.
			return outbox.Wait(err, d)
		}
		return err
	}
	if err := p.confirm(ctx, m, ack.Sequence); err != nil {
		publishes.WithLabelValues(PublishFailed).Inc()
		// A wait (outbox.Wait) stays one through the wrapping.
		return fmt.Errorf("publish %s %s: acked at sequence %d, not settled: %w", m.Tag, m.ID, ack.Sequence, err)
	}
	if ack.Duplicate {
		publishes.WithLabelValues(PublishDuplicate).Inc()
	} else {
		publishes.WithLabelValues(PublishStored).Inc()
	}
	p.logger.DebugContext(ctx, "event published", "id", m.ID, "tag", m.Tag, "attempt", m.Attempt,
		"seq", ack.Sequence, "duplicate", ack.Duplicate)
	return nil
}

// offline reports whether the connection is down, and then how long a row
// waits: as long as the connection has been down so far, notReadyWait to
// offlineWaitMax. Nothing reaches the broker meanwhile, so a row waits
// (outbox.Wait) instead of spending attempts on an outage, whatever its
// length and the relay's retry settings, and a long one costs each row a
// claim every offlineWaitMax at most. A publish that reaches the server and
// gets no ack (a server that hangs) is still a failed attempt.
func (p *Publisher) offline() (time.Duration, bool) {
	if p.nc.IsConnected() {
		if p.down.Load() != 0 {
			p.down.Store(0)
		}
		return 0, false
	}
	now := time.Now().UnixNano()
	p.down.CompareAndSwap(0, now)
	return min(max(time.Duration(now-p.down.Load()), notReadyWait), offlineWaitMax), true
}

// errNotKept is why a publish acked by the stream is not a success: the message
// may have been stored while a durable was missing, which an interest stream
// does not keep for it.
var errNotKept = errors.New("not known to be kept for every durable")

const (
	// ClockSkew is how far labeling's clock (a row's created_at) and the NATS
	// server's (a durable's creation time) may differ for confirm's rule
	// "made before the row" to hold. Hosts kept by NTP differ by
	// milliseconds. The price of the margin: a row appended within ClockSkew
	// after a durable was made, whose message is no longer in the stream when
	// its publish is acked again, waits for the duplicate window.
	ClockSkew = 10 * time.Second
	// notReadyWait is how long a row waits, without spending an attempt, for
	// the stream loop to make the stream or a durable (again): the loop
	// starts at once when kicked and retries within its backoff.
	notReadyWait = time.Second
	// offlineWaitMax is the longest a row waits for a lost connection
	// before it is tried again (see offline).
	offlineWaitMax = 30 * time.Second
	// windowGrace is added to the duplicate window a row waits out: the
	// server forgets an id on a timer, a little after the window ends.
	windowGrace = time.Second
)

// durableState is one durable of cfg.Consumers as confirm read it after an ack.
type durableState struct {
	name    string
	created time.Time
	seen    instance // as ensure last saw it
	known   bool     // ensure saw it
}

// keptByCreation reports whether the durable's incarnation was created before
// m was appended, so before its message was stored (ClockSkew apart).
func (d durableState) keptByCreation(m outbox.Message) bool {
	return d.created.Add(ClockSkew).Before(time.UnixMilli(m.CreatedAt))
}

// keptByBoundary reports whether the durable is the incarnation ensure saw
// and seq is above the boundary read after it: stored while it existed.
func (d durableState) keptByBoundary(seq uint64) bool {
	return d.known && d.created.Equal(d.seen.created) && seq > d.seen.boundary
}

// confirm returns nil only if the message of m that the stream acked at seq is
// kept for every durable of cfg.Consumers whose filter takes its subject (as
// the server reports the durable after the ack), that is, was stored while an
// incarnation of each existed: an interest stream then removes it only once
// that incarnation has acked or terminated it (or is deleted). It reads each
// durable after the ack, so the incarnation it reads existed from its
// creation until after the message was stored, and for each durable one of
// these must hold:
//
//   - created before the row: the incarnation's creation time is more than
//     ClockSkew before m.CreatedAt, and the message can only have been stored
//     after its row was appended. This holds across a restart of labeling (it
//     needs no memory) and of the server (which keeps a durable's creation
//     time, to within a millisecond on 2.9), and whatever the sequence: a
//     duplicate ack of a message every durable has consumed since, which the
//     stream no longer holds, is settled, rightly.
//   - the incarnation ensure saw, and seq above the boundary read after it:
//     stored within the span it existed, for a durable made after the row
//     (ensure made it again). A message dropped for no interest while the
//     durable was missing is recorded in the duplicate window with sequence 0
//     (2.9) or its own, never above a boundary read after the durable was made.
//   - the stream still holds message seq: a durable made after it, delivering
//     all, gets it.
//
// A message dropped for no interest fails all three: it was stored while some
// durable was missing, so before that durable's current incarnation was made,
// whose creation is then after the row's append (the first fails), whose
// boundary is at or above it (the second fails), and the stream does not hold
// it (the third fails). Such a row waits (outbox.Wait: no attempt spent) until
// its id has left the duplicate window, when its next publish is stored anew.
// A missing durable also makes the row wait, a short while: labeling makes it
// again, and the next try decides.
//
// A subject no durable of cfg.Consumers takes is settled on the ack: the
// stream keeps such a message for no durable of labeling's (a team's own
// durable that takes it still holds it), and waiting would keep the row for
// a consumer that is never coming. It is logged once a subject (noTaker).
func (p *Publisher) confirm(ctx context.Context, m outbox.Message, seq uint64) error {
	p.mu.Lock()
	want := maps.Clone(p.instances)
	p.mu.Unlock()
	subject := Subject(m.Tag)
	// One read, begun after this ack, of every durable (shared with the
	// other publishes in flight: durableReads).
	durables, err := p.durables.get(ctx)
	if err != nil {
		return fmt.Errorf("durables: %w", err)
	}
	var undecided []durableState
	takers := 0
	for _, durable := range p.cfg.Consumers {
		c, err := durables[durable].info, durables[durable].err
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			// Missing: make it before anything more is settled.
			p.block(fmt.Errorf("durable %s was deleted: %w", durable, errNotKept))
			p.kickStream()
			return outbox.Wait(fmt.Errorf("durable %s: %w (%w)", durable, errNotKept, err), notReadyWait)
		}
		if err != nil {
			return fmt.Errorf("durable %s: %w", durable, err)
		}
		if !Takes(c.Config, subject) {
			continue
		}
		takers++
		in, known := want[durable]
		d := durableState{name: durable, created: c.Created, seen: in, known: known}
		if known && !d.created.Equal(in.created) {
			// Made again, or read back after a server restart: ensure notes
			// the incarnation and its boundary.
			p.kickStream()
		}
		if !d.keptByCreation(m) && !d.keptByBoundary(seq) {
			undecided = append(undecided, d)
		}
	}
	if takers == 0 {
		p.noTaker(subject)
	}
	if len(undecided) == 0 {
		return nil
	}
	if seq > 0 { // 0 is no message: 2.9's duplicate ack of one dropped for no interest
		st, err := p.js.Stream(ctx, Name)
		if err != nil {
			return err
		}
		_, err = st.GetMsg(ctx, seq)
		if err == nil {
			return nil
		}
		if !errors.Is(err, jetstream.ErrMsgNotFound) {
			return fmt.Errorf("sequence %d: %w", seq, err)
		}
	}
	d := undecided[0]
	return outbox.Wait(fmt.Errorf("sequence %d not in the stream and durable %s made at %s, not before the row was appended at %s: "+
		"perhaps dropped for no interest: %w; waiting for its id to leave the duplicate window (%s)",
		seq, d.name, d.created.UTC().Format(time.RFC3339Nano), time.UnixMilli(m.CreatedAt).UTC().Format(time.RFC3339Nano),
		errNotKept, p.cfg.DuplicateWindow), p.windowWait(m))
}

// noTaker logs, once a subject, that no durable of cfg.Consumers takes it,
// so its rows are settled on the publish ack alone.
func (p *Publisher) noTaker(subject string) {
	p.mu.Lock()
	if p.noted == nil {
		p.noted = map[string]bool{}
	}
	first := !p.noted[subject]
	p.noted[subject] = true
	p.mu.Unlock()
	if first {
		p.logger.Warn("no durable takes "+subject+": its messages are settled after their publish ack, kept for no durable of NATS_CONSUMERS",
			"stream", Name, "consumers", p.cfg.Consumers)
	}
}

// windowWait is how long a row whose id may be in the duplicate window as a
// message dropped for no interest waits before its next publish. The window
// runs from the id's first publish, which came after the row's append: not
// before CreatedAt + DuplicateWindow (+ windowGrace). Once that has passed and
// the id is still there (the first publish came late, or the clocks differ),
// it waits a tenth of the window (1s to 1m) at a time, so a window costs about
// ten tries at most, none of them an attempt.
func (p *Publisher) windowWait(m outbox.Message) time.Duration {
	if d := time.Until(time.UnixMilli(m.CreatedAt).Add(p.cfg.DuplicateWindow + windowGrace)); d > 0 {
		return d
	}
	return min(max(p.cfg.DuplicateWindow/10, time.Second), time.Minute)
}

// Subscriber returns an outbox subscriber of E's tag that publishes each row to
// the stream. The payload is decoded into E (and validated, if E has Validate)
// first, so a payload no consumer could apply fails the row at once.
func Subscriber[E outbox.Event](p *Publisher) outbox.Subscriber {
	return outbox.Subscribe(func(ctx context.Context, m outbox.Message, _ E) error {
		return p.Publish(ctx, m)
	})
}

// message is m as the stream stores it, signed, in the configured format.
func (p *Publisher) message(m outbox.Message) (*nats.Msg, error) {
	msg := nats.NewMsg(Subject(m.Tag))
	msg.Header = nats.Header{}
	if p.cfg.Format == wire.FormatCloudEvents {
		// Set, not Add: nats.Header keeps a name's letter case as given, and
		// the binding's names are lowercase.
		for _, h := range wire.BinaryHeaders(m.ID, m.Tag, delivery.Source, m.CreatedAt) {
			msg.Header[h[0]] = []string{h[1]}
		}
		msg.Header[wire.HeaderDataContentType] = []string{wire.ContentTypeJSON}
		msg.Data = m.Payload
		signed := SignedCloudEvent(m.Tag, msg.Header[wire.HeaderTime][0], msg.Data)
		msg.Header.Set(SignatureHeader, Sign(p.cfg.Key, msg.Subject, m.ID.String(), signed))
		return msg, nil
	}
	body, err := delivery.Envelope(m)
	if err != nil {
		return nil, err
	}
	msg.Data = body
	msg.Header.Set(SignatureHeader, Sign(p.cfg.Key, msg.Subject, m.ID.String(), body))
	return msg, nil
}

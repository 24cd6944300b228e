package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/acme/outboxpair/infra/delivery"
	"github.com/acme/outboxpair/infra/outbox"
)

// PublisherConfig is what Labeling's publisher needs from its configuration.
type PublisherConfig struct {
	URL      string // NATS_URL; several servers separated by commas
	Replicas int    // NATS_REPLICAS: replicas of the stream
	// DuplicateWindow (NATS_DUPLICATE_WINDOW) is how long the broker remembers a
	// Nats-Msg-Id: a republish of a row within it is acked as a duplicate and not
	// stored again.
	DuplicateWindow time.Duration
	// MaxAge is how long the stream keeps a message (OUTBOX_PROCESSED_RETENTION):
	// as long as the outbox keeps the processed row. At least DuplicateWindow.
	MaxAge time.Duration
}

// StreamConfig is the stream Labeling creates or updates at start.
func (c PublisherConfig) StreamConfig() jetstream.StreamConfig {
	return jetstream.StreamConfig{
		Name:        Name,
		Description: "Labeling's outbox events; Nats-Msg-Id is the outbox row id",
		Subjects:    []string{Subjects},
		Storage:     jetstream.FileStorage,
		Retention:   jetstream.LimitsPolicy, // consumers come and go; none removes a message for the others
		Replicas:    c.Replicas,
		Duplicates:  c.DuplicateWindow,
		MaxAge:      c.MaxAge,
	}
}

// Publisher publishes outbox rows to the stream. Start connects (or keeps trying
// in the background) and creates or updates the stream in the background; it
// never fails because NATS is unreachable. It is safe for concurrent use.
type Publisher struct {
	cfg    PublisherConfig
	logger *slog.Logger

	nc     *nats.Conn
	js     jetstream.JetStream
	kick   chan struct{} // asks the stream loop to create or update the stream again
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// NewPublisher returns a publisher for cfg; it does not connect until Start.
func NewPublisher(cfg PublisherConfig, logger *slog.Logger) (*Publisher, error) {
	if cfg.URL == "" {
		return nil, errors.New("NATS_URL: required with EVENTS_TRANSPORT=nats")
	}
	if cfg.Replicas <= 0 {
		cfg.Replicas = 1
	}
	if cfg.DuplicateWindow <= 0 {
		return nil, errors.New("NATS_DUPLICATE_WINDOW: must be positive")
	}
	if cfg.MaxAge > 0 && cfg.MaxAge < cfg.DuplicateWindow {
		return nil, fmt.Errorf("NATS_DUPLICATE_WINDOW: %s is longer than the stream's max age %s", cfg.DuplicateWindow, cfg.MaxAge)
	}
	return &Publisher{cfg: cfg, logger: logger, kick: make(chan struct{}, 1)}, nil
}

// Start connects and starts the loop that creates or updates the stream.
func (p *Publisher) Start(context.Context) error {
	nc, err := connect(p.cfg.URL, "labeling", p.logger)
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

// ensureLoop creates or updates the stream whenever kicked (at start, and when a
// publish finds no stream), retrying with backoff until the server answers.
func (p *Publisher) ensureLoop(ctx context.Context) {
	defer p.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
		for n := 1; ; n++ {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := p.js.CreateOrUpdateStream(cctx, p.cfg.StreamConfig())
			cancel()
			if err == nil {
				p.logger.Info("nats stream ready", "stream", Name, "replicas", p.cfg.Replicas,
					"duplicate_window", p.cfg.DuplicateWindow.String())
				break
			}
			if ctx.Err() != nil {
				return
			}
			if n == 1 {
				p.logger.Warn("nats stream not ready, retrying in the background", "stream", Name, "err", err.Error())
			}
			if !sleep(ctx, backoff(n)) {
				return
			}
		}
	}
}

// Publish publishes m to labeling.events.<tag> with Nats-Msg-Id = the row id
// and returns nil only on the broker's ack: the message is stored (or was stored
// before, which the ack reports as a duplicate, a success). Every failure is an
// ordinary error the relay retries after its durable delay.
func (p *Publisher) Publish(ctx context.Context, m outbox.Message) error {
	if p.js == nil {
		return errors.New("nats publisher not started")
	}
	body, err := delivery.Envelope(m)
	if err != nil {
		return outbox.Permanent(fmt.Errorf("encode %s %s: %w", m.Tag, m.ID, err))
	}
	msg := nats.NewMsg(Subject(m.Tag))
	msg.Data = body
	ctx, span := publishSpan(ctx, msg, m) // nil, at no cost, with tracing off
	ack, err := p.js.PublishMsg(ctx, msg, jetstream.WithMsgID(m.ID.String()), jetstream.WithExpectStream(Name))
	endSpan(span, err)
	if err != nil {
		publishes.WithLabelValues(PublishFailed).Inc()
		if errors.Is(err, jetstream.ErrNoStreamResponse) || errors.Is(err, nats.ErrNoResponders) ||
			errors.Is(err, jetstream.ErrStreamNotFound) {
			p.kickStream() // deleted, or not created yet: make it again
		}
		return fmt.Errorf("publish %s %s: %w", m.Tag, m.ID, err)
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

// Subscriber returns an outbox subscriber of E's tag that publishes each row to
// the stream. The payload is decoded into E (and validated, if E has Validate)
// first, so a payload no consumer could apply fails the row at once.
func Subscriber[E outbox.Event](p *Publisher) outbox.Subscriber {
	return outbox.Subscribe(func(ctx context.Context, m outbox.Message, _ E) error {
		return p.Publish(ctx, m)
	})
}

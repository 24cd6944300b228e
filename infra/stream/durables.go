package stream

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// durableRead is one durable of cfg.Consumers as one read of the server
// reported it: its info, or the error reading it.
type durableRead struct {
	info *jetstream.ConsumerInfo
	err  error
}

// durableReads shares the reads of the durables that confirm makes after each
// publish ack among the publishes in flight. A read per ack costs the server a
// consumer-info request per message, which on a busy host takes more of it
// than the publish itself (bench/results/2026-12-04.md). What confirm needs of
// a read is only that it began after its own ack (the durable it reads then
// existed from its creation until after the message was stored), and any read
// that begins later serves every ack received before it as well. So a call
// never takes a read already under way: it joins the next one, which starts
// when the one under way ends, and each read answers every call that joined
// it. At most one read is under way at a time, and with one publish in flight
// there is exactly one read per ack, at no added wait.
type durableReads struct {
	read func(context.Context) map[string]durableRead

	mu      sync.Mutex
	running bool       // a read is under way (run is looping)
	next    *readRound // the read that starts after the one under way; nil when none has joined it yet
}

// readRound is one read and the calls it answers.
type readRound struct {
	done  chan struct{} // closed when got is set
	got   map[string]durableRead
	calls int // the calls it answers (guarded by durableReads.mu)
}

// durableReadTimeout bounds one read of the durables; it answers several
// publishes, so no single one's context bounds it.
const durableReadTimeout = 5 * time.Second

// get returns the durables as a read that began after get was called reported
// them, or ctx's error if ctx ends first.
func (d *durableReads) get(ctx context.Context) (map[string]durableRead, error) {
	d.mu.Lock()
	if d.next == nil {
		d.next = &readRound{done: make(chan struct{})}
	}
	r := d.next
	r.calls++
	if !d.running {
		// Nothing under way: this read starts now, after the call.
		d.running = true
		d.next = nil
		go d.run(r)
	}
	d.mu.Unlock()
	select {
	case <-r.done:
		return r.got, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// run makes read r, then the reads that calls joined meanwhile, one after
// another, until none has been joined.
func (d *durableReads) run(r *readRound) {
	for r != nil {
		ctx, cancel := context.WithTimeout(context.Background(), durableReadTimeout)
		r.got = d.read(ctx)
		cancel()
		close(r.done)
		d.mu.Lock()
		r, d.next = d.next, nil
		d.running = r != nil
		d.mu.Unlock()
	}
}

// readDurables reads each durable of cfg.Consumers from the server.
func (p *Publisher) readDurables(ctx context.Context) map[string]durableRead {
	got := make(map[string]durableRead, len(p.cfg.Consumers))
	for _, durable := range p.cfg.Consumers {
		c, err := p.js.Consumer(ctx, Name, durable)
		if err != nil {
			got[durable] = durableRead{err: err}
			continue
		}
		got[durable] = durableRead{info: c.CachedInfo()}
	}
	return got
}

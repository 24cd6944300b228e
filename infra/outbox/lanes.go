package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
)

// Lane is one further subscriber's relay (fan-out): the handlers of its rows,
// the rows a store built WithRoutes appended for it.
type Lane struct {
	Subscriber  string // the Route's name; its rows' subscriber column
	Subscribers []Subscriber
}

// Lanes are the relays of one table, one per subscriber: the default
// subscriber's (NewRelay's) and one per Lane. Each claims only its own
// subscriber's rows, on its own loop, workers and connections, so a
// subscriber that is down or slow fills only its own lane with retries and
// delays no other's deliveries; each settles, backs off and dead-letters its
// rows as a lone relay does. With no Lane it is NewRelay's relay alone:
// today's setup runs exactly as before.
type Lanes struct {
	relays []*Relay
}

// NewLanes returns the relays of store's table: the default subscriber's,
// dispatching to subs, and one per lane, each with cfg (Workers and
// ClaimSize are per lane). It fails when cfg is invalid or a lane's name is
// invalid or repeated.
func NewLanes(store Store, cfg Config, subs []Subscriber, lanes []Lane, logger *slog.Logger) (*Lanes, error) {
	seen := []string{DefaultSubscriber}
	l := &Lanes{}
	for _, lane := range append([]Lane{{Subscriber: DefaultSubscriber, Subscribers: subs}}, lanes...) {
		if lane.Subscriber != DefaultSubscriber {
			if err := CheckSubscriber(lane.Subscriber); err != nil {
				return nil, fmt.Errorf("outbox: lane: %w", err)
			}
			if slices.Contains(seen, lane.Subscriber) {
				return nil, fmt.Errorf("outbox: lane %q is repeated", lane.Subscriber)
			}
			seen = append(seen, lane.Subscriber)
		}
		r, err := newRelay(store, cfg, lane.Subscriber, lane.Subscribers, logger)
		if err != nil {
			l.close()
			return nil, err
		}
		l.relays = append(l.relays, r)
	}
	return l, nil
}

// close closes relays that were built but never started (a failed NewLanes).
func (l *Lanes) close() {
	for _, r := range l.relays {
		_ = r.Stop(context.Background())
	}
}

// Relay is the relay of subscriber (DefaultSubscriber for the default one),
// nil when there is none.
func (l *Lanes) Relay(subscriber string) *Relay {
	for _, r := range l.relays {
		if r.subscriber == subscriber {
			return r
		}
	}
	return nil
}

// Start starts every lane's relay; if one fails, those started are stopped.
func (l *Lanes) Start(ctx context.Context) error {
	for i, r := range l.relays {
		if err := r.Start(ctx); err != nil {
			for _, started := range l.relays[:i] {
				_ = started.Stop(ctx)
			}
			return err
		}
	}
	return nil
}

// Stop stops every lane's relay at once, each as Relay.Stop does, all within
// ctx: the lanes' shares are not added up.
func (l *Lanes) Stop(ctx context.Context) error {
	errs := make([]error, len(l.relays))
	var wg sync.WaitGroup
	for i, r := range l.relays {
		wg.Go(func() { errs[i] = r.Stop(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Nudge wakes every lane's relay (an append gives each subscriber of its tag
// a row) and, with Config.Notify, every relay of the table elsewhere: one
// notification, sent by the default lane, since every lane listens on the
// table's one channel. It never blocks.
func (l *Lanes) Nudge() {
	l.relays[0].Nudge()
	for _, r := range l.relays[1:] {
		r.wake()
	}
}

package outbox

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/stopbudget"
)

// StopShare is the relay's share of the stop budget (contract section 5):
// waiting for its dispatches, then cancelling them and releasing every
// unsettled claim.
var StopShare = stopbudget.Share{Name: "relay", Timeout: 8 * time.Second}

// Module provides the relays (*Lanes, also as a Nudger) started and stopped
// with the app, and registers the retention of processed rows with the
// cleanup. The app supplies Config, []Subscriber (the default subscriber's),
// the Store of its database (NewStore) and *slog.Logger, and, to fan out,
// []Lane (one relay each; its Store built WithRoutes of the same names).
// Its stop (the relay's, and its gauges') takes at most StopShare.
var Module = stopbudget.Module(StopShare, Components)

// Components is Module without a share of the stop budget of its own: for an
// app in which the relay stops within another component's share
// (stopbudget.Part), as billing's relay does within its NATS consumer's when
// both run, so that the total stays under the orchestrator's grace.
var Components = fx.Module("outbox",
	fx.Provide(
		fx.Annotate(func(p lanesIn) (*Lanes, error) {
			return NewLanes(p.Store, p.Config, p.Subscribers, p.Lanes, p.Logger)
		}, fx.As(fx.Self()), fx.As(new(Nudger))),
		fx.Annotate(
			func(cfg Config, store Store) retention.Policy {
				return ProcessedRetention(store, cfg.ProcessedRetention)
			},
			fx.ResultTags(`group:"retention"`),
		),
	),
	// An Invoke, not a dependency, starts the relay: the app must deliver its
	// events even when nothing in it asks for the relay.
	fx.Invoke(func(lc fx.Lifecycle, r *Lanes) {
		lc.Append(fx.Hook{OnStart: r.Start, OnStop: r.Stop})
	}),
	// The backlog gauges are what to alert on; registered for the app's lifetime
	// so that apps built one after another in a test process do not collide.
	fx.Invoke(func(lc fx.Lifecycle, store Store) {
		c := NewBacklogCollector(store)
		lc.Append(fx.Hook{
			OnStart: func(context.Context) error { return prometheus.Register(c) },
			OnStop:  func(context.Context) error { prometheus.Unregister(c); return nil },
		})
	}),
)

// ProcessedRetention is the retention of processed outbox rows of store: those
// processed more than keep ago are deleted, in chunks. Pending and failed rows
// are never touched (their processed_at is NULL): the dead letter waits for an
// operator.
func ProcessedRetention(store Store, keep time.Duration) retention.Policy {
	return retention.Policy{
		Name: store.Table(),
		Keep: keep,
		Delete: func(ctx context.Context, before int64, limit int) (int64, error) {
			n, err := store.DeleteProcessed(ctx, before, limit)
			if err != nil {
				return 0, fmt.Errorf("outbox: delete processed rows: %w", err)
			}
			return n, nil
		},
	}
}

// lanesIn is what Module's relays are built from; Lanes is optional (no
// fan-out without it).
type lanesIn struct {
	fx.In
	Store       Store
	Config      Config
	Subscribers []Subscriber
	Lanes       []Lane `optional:"true"`
	Logger      *slog.Logger
}

package stream

import (
	"go.uber.org/fx"
)

// Module runs a *Publisher supplied by the app (Labeling with EVENTS_TRANSPORT=nats):
// it starts on the app's start and stops on its stop. The relay's subscribers are
// built from the same *Publisher with Subscriber.
var Module = fx.Module("stream",
	fx.Invoke(func(lc fx.Lifecycle, p *Publisher) {
		lc.Append(fx.Hook{OnStart: p.Start, OnStop: p.Stop})
	}),
)

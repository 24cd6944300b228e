package outbox_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/fx/fxtest"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

func TestModule(t *testing.T) {
	t.Parallel()
	// One dialect after the other: the backlog collector is registered for the
	// app's lifetime, and two apps at once would collide.
	for _, d := range dbtest.Dialects {
		t.Run(string(d), func(t *testing.T) {
			db := newDBOn(t, d)
			cfg := testConfig()
			cfg.PollInterval = time.Hour // only the start tick and nudges deliver

			delivered := make(chan outbox.Message, 1)
			var nudger outbox.Nudger
			var cleanup *retention.Cleanup
			app := fxtest.New(t,
				fx.Supply(fx.Annotate(storeOf(t, db), fx.As(new(outbox.Store))), cfg, testLogger(t), retention.Config{Interval: time.Hour}),
				fx.Provide(func() []outbox.Subscriber {
					return []outbox.Subscriber{handle(func(_ context.Context, m outbox.Message) error {
						delivered <- m
						return nil
					})}
				}),
				outbox.Module,
				retention.Module,
				fx.Populate(&nudger, &cleanup),
			)
			app.RequireStart()

			t.Run("the relay runs with the app and the nudger wakes it", func(t *testing.T) {
				id := appendEvents(t, db, thing{N: 1})[0]
				nudger.Nudge()
				select {
				case m := <-delivered:
					require.Equal(t, id, m.ID)
				case <-time.After(10 * time.Second):
					t.Fatal("the nudged relay delivered nothing")
				}
				require.Eventually(t, func() bool { return getRow(t, db, id).ProcessedAt != nil },
					10*time.Second, 10*time.Millisecond)
			})

			t.Run("processed rows are registered with the cleanup", func(t *testing.T) {
				deleted, err := cleanup.RunOnce(ctxT(t))
				require.NoError(t, err)
				require.Contains(t, deleted, "outbox_events")
			})

			app.RequireStop()
		})
	}
}

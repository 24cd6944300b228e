package stopbudget_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/stopbudget"
)

func TestShares(t *testing.T) {
	t.Parallel()

	t.Run("the budget is the sum of the declared shares", func(t *testing.T) {
		t.Parallel()
		var shares []stopbudget.Share
		app := fx.New(
			stopbudget.Module(stopbudget.Share{Name: "a", Timeout: 3 * time.Second}),
			stopbudget.Declare("b", func() time.Duration { return 2 * time.Second }),
			fx.Invoke(fx.Annotate(func(s []stopbudget.Share) { shares = s }, fx.ParamTags(stopbudget.Group))),
			fx.NopLogger,
		)
		require.NoError(t, app.Err())
		require.ElementsMatch(t, []stopbudget.Share{{Name: "a", Timeout: 3 * time.Second}, {Name: "b", Timeout: 2 * time.Second}}, shares)
		require.Equal(t, 5*time.Second, stopbudget.Total(shares))
	})

	t.Run("a hook outside any share is reported, one inside is not", func(t *testing.T) {
		t.Parallel()
		var unbounded []string
		stop := func(context.Context) error { return nil }
		app := fx.New(
			stopbudget.Audit(func(hook string) { unbounded = append(unbounded, hook) }),
			stopbudget.Module(stopbudget.Share{Name: "declared", Timeout: time.Second},
				fx.Invoke(func(lc fx.Lifecycle) { lc.Append(fx.Hook{OnStop: stop}) })),
			stopbudget.Part("declared", fx.Invoke(func(lc fx.Lifecycle) { lc.Append(fx.Hook{OnStop: stop}) })),
			fx.Invoke(func(lc fx.Lifecycle) { lc.Append(fx.Hook{OnStop: undeclaredStop}) }),
			fx.Invoke(func(lc fx.Lifecycle) { lc.Append(fx.Hook{OnStart: stop}) }), // starts only: needs no share
			fx.NopLogger,
		)
		require.NoError(t, app.Err())
		require.Len(t, unbounded, 1, "%v", unbounded)
		require.Contains(t, unbounded[0], "undeclaredStop")
	})

	t.Run("a part of a share the app does not declare is left as it is, and reported", func(t *testing.T) {
		t.Parallel()
		var unbounded []string
		app := fx.New(
			stopbudget.Audit(func(hook string) { unbounded = append(unbounded, hook) }),
			stopbudget.Part("nobody-declared-it", fx.Invoke(func(lc fx.Lifecycle) { lc.Append(fx.Hook{OnStop: undeclaredStop}) })),
			fx.NopLogger,
		)
		require.NoError(t, app.Err(), "a component runs alone, as in its own tests")
		require.Len(t, unbounded, 1, "%v", unbounded)
		require.Contains(t, unbounded[0], "undeclaredStop")
	})

	t.Run("the hooks of one share take no more than it together", func(t *testing.T) {
		t.Parallel()
		var second time.Duration
		app := fx.New(
			stopbudget.Module(stopbudget.Share{Name: "s", Timeout: 300 * time.Millisecond},
				fx.Invoke(func(lc fx.Lifecycle) {
					// Appended first, stops last: it gets what the first left.
					lc.Append(fx.Hook{OnStop: func(ctx context.Context) error {
						deadline, ok := ctx.Deadline()
						require.True(t, ok)
						second = time.Until(deadline)
						return nil
					}})
					lc.Append(fx.Hook{OnStop: func(ctx context.Context) error {
						time.Sleep(200 * time.Millisecond)
						return nil
					}})
				})),
			fx.NopLogger,
		)
		require.NoError(t, app.Err())
		require.NoError(t, app.Start(t.Context()))
		require.NoError(t, app.Stop(t.Context()))
		require.Less(t, second, 150*time.Millisecond, "the second hook had only what the first left")
		require.Positive(t, second)
	})
}

func undeclaredStop(context.Context) error { return nil }

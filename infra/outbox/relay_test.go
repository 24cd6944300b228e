package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

func TestNewRelay(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)

		t.Run("rejects a handler timeout over the lease, naming the values", func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.ClaimSize, cfg.HandlerTimeout, cfg.Lease = 1, 30*time.Second, 29*time.Second
			_, err := outbox.NewRelay(storeOf(t, db), cfg, nil, nil)
			require.ErrorContains(t, err, "Lease: 29s is shorter than HandlerTimeout (30s)")
		})

		// Every row of a claim starts at once, so claim size × timeout may exceed
		// the lease.
		t.Run("accepts a claim of 100 rows of 30s each under a 5m lease", func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.ClaimSize, cfg.Workers, cfg.HandlerTimeout, cfg.Lease = 100, 40, 30*time.Second, 5*time.Minute
			r, err := outbox.NewRelay(storeOf(t, db), cfg, nil, nil)
			require.NoError(t, err)
			require.NoError(t, r.Stop(ctxT(t)))
		})

		t.Run("rejects values that are not positive, naming them", func(t *testing.T) {
			t.Parallel()
			for name, mutate := range map[string]func(*outbox.Config){
				"PollInterval: 0s must be positive":       func(c *outbox.Config) { c.PollInterval = 0 },
				"ClaimSize: -1 must be positive":          func(c *outbox.Config) { c.ClaimSize = -1 },
				"HandlerTimeout: 0s must be positive":     func(c *outbox.Config) { c.HandlerTimeout = 0 },
				"Lease: 0s must be positive":              func(c *outbox.Config) { c.Lease = 0 },
				"MaxAttempts: 0 must be positive":         func(c *outbox.Config) { c.MaxAttempts = 0 },
				"RetryBase: 0s must be positive":          func(c *outbox.Config) { c.RetryBase = 0 },
				"ProcessedRetention: 0s must be positive": func(c *outbox.Config) { c.ProcessedRetention = 0 },
				"RetryMax: 1s is less than RetryBase (2s)": func(c *outbox.Config) {
					c.RetryBase, c.RetryMax = 2*time.Second, time.Second
				},
			} {
				cfg := testConfig()
				mutate(&cfg)
				_, err := outbox.NewRelay(storeOf(t, db), cfg, nil, nil)
				require.ErrorContains(t, err, name)
			}
		})

		t.Run("rejects a subscriber without a tag or handler", func(t *testing.T) {
			t.Parallel()
			_, err := outbox.NewRelay(storeOf(t, db), testConfig(), []outbox.Subscriber{{Tag: "", Handle: ok}}, nil)
			require.ErrorContains(t, err, "subscriber 0")
			_, err = outbox.NewRelay(storeOf(t, db), testConfig(), []outbox.Subscriber{{Tag: "Thing"}}, nil)
			require.ErrorContains(t, err, "subscriber 0")
		})
	})
}

func TestRelayLifecycle(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)

		t.Run("start twice is an error, stop twice is harmless", func(t *testing.T) {
			t.Parallel()
			r := newRelay(t, db, testConfig())
			require.NoError(t, r.Start(ctxT(t)))
			require.ErrorContains(t, r.Start(ctxT(t)), "already started")
			require.NoError(t, r.Stop(ctxT(t)))
			require.NoError(t, r.Stop(ctxT(t)))
			require.ErrorContains(t, r.Start(ctxT(t)), "already")
		})

		t.Run("stop before start is harmless and start after it fails", func(t *testing.T) {
			t.Parallel()
			r := newRelay(t, db, testConfig())
			require.NoError(t, r.Stop(ctxT(t)))
			require.ErrorContains(t, r.Start(ctxT(t)), "already stopped")
		})
	})
}

func TestRelayConcurrent(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)
		const rows, relays = 2000, 4
		appendEvents(t, db, things(rows)...)

		var mu sync.Mutex
		calls := make(map[uuid.UUID]int)
		counting := handle(func(_ context.Context, m outbox.Message) error {
			mu.Lock()
			calls[m.ID]++
			mu.Unlock()
			return nil
		})
		cfg := testConfig()
		cfg.ClaimSize = 25
		cfg.PollInterval = 10 * time.Millisecond
		all := make([]*outbox.Relay, relays)
		for i := range all {
			all[i] = newRelay(t, db, cfg, counting)
		}
		for _, r := range all {
			require.NoError(t, r.Start(ctxT(t)))
		}
		require.Eventually(t, func() bool { return count(t, db, "processed_at IS NULL") == 0 },
			60*time.Second, 20*time.Millisecond)
		for _, r := range all {
			require.NoError(t, r.Stop(ctxT(t)))
		}

		for _, r := range allRows(t, db) {
			require.NotNil(t, r.ProcessedAt, "row %s processed", r.ID)
			require.Equal(t, 1, r.Attempts, "row %s claimed and settled once", r.ID)
			require.Nil(t, r.ClaimedUntil)
			require.Nil(t, r.FailedAt)
		}
		mu.Lock()
		defer mu.Unlock()
		require.Len(t, calls, rows, "handler called for every row")
		total := 0
		for id, n := range calls {
			require.GreaterOrEqual(t, n, 1, "row %s", id)
			total += n
		}
		t.Logf("%d relays, %d rows: %d handler calls, %d duplicates", relays, rows, total, total-rows)
	})
}

func TestRelayFencing(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		// setup: relay A claims the row and its handler blocks until the test hands
		// it an outcome; the lease is then made to expire and relay B reclaims it.
		type bundle struct {
			pool    *dbtest.DB
			id      uuid.UUID
			aResult chan error // what A's handler returns
			aDone   chan error // A's RunOnce outcome
			bDone   chan error // B's RunOnce outcome
		}
		setup := func(t *testing.T, bHandler outbox.Handler) bundle {
			db := newDBOn(t, d)
			entered := make(chan struct{})
			aResult := make(chan error)
			a := newRelay(t, db, testConfig(), handle(func(context.Context, outbox.Message) error {
				close(entered)
				return <-aResult
			}))
			b := newRelay(t, db, testConfig(), handle(bHandler))
			id := appendEvents(t, db, thing{N: 1})[0]

			runOne := func(r *outbox.Relay) chan error {
				done := make(chan error, 1)
				go func() {
					n, err := r.RunOnce(context.Background())
					if err == nil && n != 1 {
						err = fmt.Errorf("claimed %d rows, want 1", n)
					}
					done <- err
				}()
				return done
			}
			aDone := runOne(a)
			<-entered
			require.Equal(t, 1, getRow(t, db, id).Attempts)
			exec(t, db, `UPDATE outbox_events SET claimed_until = $2 WHERE id = $1`, id, time.Now().Add(-time.Second).UnixMilli())
			return bundle{pool: db, id: id, aResult: aResult, aDone: aDone, bDone: runOne(b)}
		}

		lateOutcomes := map[string]error{
			"success":           nil,
			"failure":           errors.New("A failed late"),
			"permanent failure": outbox.Permanent(errors.New("A gives up late")),
		}
		reclaimOutcomes := map[string]error{
			"succeeded": nil,
			"failed":    errors.New("B failed"),
		}
		for late, aErr := range lateOutcomes {
			for reclaim, bErr := range reclaimOutcomes {
				t.Run("a late "+late+" changes nothing after the reclaim "+reclaim, func(t *testing.T) {
					t.Parallel()
					x := setup(t, func(context.Context, outbox.Message) error { return bErr })
					require.NoError(t, <-x.bDone)
					afterB := getRow(t, x.pool, x.id)
					require.Equal(t, 2, afterB.Attempts)
					require.Nil(t, afterB.ClaimedUntil)

					x.aResult <- aErr
					require.NoError(t, <-x.aDone)
					require.Equal(t, afterB, getRow(t, x.pool, x.id), "B's outcome stands")
				})

				t.Run("a late "+late+" changes nothing while the reclaim is in flight, then the reclaim "+reclaim, func(t *testing.T) {
					t.Parallel()
					bEntered, bRelease := make(chan struct{}), make(chan struct{})
					x := setup(t, func(context.Context, outbox.Message) error {
						close(bEntered)
						<-bRelease
						return bErr
					})
					<-bEntered
					bClaim := getRow(t, x.pool, x.id)
					require.Equal(t, 2, bClaim.Attempts)

					x.aResult <- aErr
					require.NoError(t, <-x.aDone)
					require.Equal(t, bClaim, getRow(t, x.pool, x.id), "A cannot settle B's live claim")

					close(bRelease)
					require.NoError(t, <-x.bDone)
					final := getRow(t, x.pool, x.id)
					require.Nil(t, final.ClaimedUntil)
					require.Nil(t, final.FailedAt, "B's outcome stands")
					if bErr == nil {
						require.NotNil(t, final.ProcessedAt)
					} else {
						require.Equal(t, "B failed", *final.LastError)
					}
				})
			}
		}
	})
}

func TestRelayLease(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		cfg := testConfig()

		// setup leaves the row claimed until claimedUntil by a claimer whose lease
		// was cfg.Lease.
		setup := func(t *testing.T, claimedUntil time.Time) (*outbox.Relay, *dbtest.DB, uuid.UUID) {
			db := newDBOn(t, d)
			r := newRelay(t, db, cfg, handle(ok))
			id := appendEvents(t, db, thing{N: 1})[0]
			exec(t, db, `UPDATE outbox_events SET claimed_until = $2, claim_lease = $3, attempts = 1 WHERE id = $1`,
				id, claimedUntil.UnixMilli(), cfg.Lease.Milliseconds())
			return r, db, id
		}

		t.Run("a row whose lease expired is reclaimed", func(t *testing.T) {
			t.Parallel()
			r, pool, id := setup(t, time.Now().Add(-time.Second))
			n, err := r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, 1, n)
			got := getRow(t, pool, id)
			require.Equal(t, 2, got.Attempts)
			require.NotNil(t, got.ProcessedAt)
		})

		t.Run("a row claimed more than twice the lease ahead is reclaimed", func(t *testing.T) {
			t.Parallel()
			r, pool, id := setup(t, time.Now().Add(2*cfg.Lease+time.Minute))
			n, err := r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.NotNil(t, getRow(t, pool, id).ProcessedAt)
		})

		t.Run("a claim far ahead without its lease (an older relay's) waits for its expiry", func(t *testing.T) {
			t.Parallel()
			r, pool, id := setup(t, time.Now().Add(2*cfg.Lease+time.Minute))
			exec(t, pool, `UPDATE outbox_events SET claim_lease = NULL WHERE id = $1`, id)
			n, err := r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Zero(t, n)
		})

		t.Run("a row under a live lease is not claimed", func(t *testing.T) {
			t.Parallel()
			for _, until := range []time.Time{time.Now().Add(cfg.Lease / 2), time.Now().Add(2*cfg.Lease - time.Minute/2)} {
				r, pool, id := setup(t, until)
				before := getRow(t, pool, id)
				n, err := r.RunOnce(ctxT(t))
				require.NoError(t, err)
				require.Zero(t, n)
				require.Equal(t, before, getRow(t, pool, id))
			}
		})
	})
}

func TestRelayBackoff(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)
		clk := newClock()
		cfg := testConfig()
		cfg.Now = clk.Now
		cfg.RetryBase, cfg.RetryMax, cfg.MaxAttempts = time.Second, time.Hour, 6
		var calls atomic.Int32
		r := newRelay(t, db, cfg, handle(func(context.Context, outbox.Message) error {
			calls.Add(1)
			return errors.New("subscriber down")
		}))
		id := appendEvents(t, db, thing{N: 1})[0]
		clk.Set(time.Now().UnixMilli()) // the append used the real clock

		prevDelay, prevAvailable := time.Duration(0), getRow(t, db, id).AvailableAt
		for attempt := 1; attempt < cfg.MaxAttempts; attempt++ {
			n, err := r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, 1, n, "attempt %d claims the row", attempt)
			got := getRow(t, db, id)
			require.Equal(t, attempt, got.Attempts)
			require.Nil(t, got.FailedAt)
			require.Nil(t, got.ClaimedUntil)
			require.Equal(t, "subscriber down", *got.LastError)

			delay := time.Duration(got.AvailableAt-clk.Ms()) * time.Millisecond
			d := cfg.RetryBase << (attempt - 1)
			require.GreaterOrEqual(t, delay, d/2, "attempt %d: equal jitter keeps at least half", attempt)
			require.LessOrEqual(t, delay, d, "attempt %d", attempt)
			require.GreaterOrEqual(t, delay, prevDelay, "attempt %d: the delay never shrinks", attempt)
			require.Greater(t, got.AvailableAt, prevAvailable, "attempt %d: available_at moves forward", attempt)
			prevDelay, prevAvailable = delay, got.AvailableAt

			clk.Set(got.AvailableAt - 1)
			n, err = r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Zero(t, n, "attempt %d: not claimed before available_at", attempt)
			clk.Set(got.AvailableAt)
		}

		n, err := r.RunOnce(ctxT(t))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		failed := getRow(t, db, id)
		require.NotNil(t, failed.FailedAt, "the last attempt dead-letters the row")
		require.Equal(t, cfg.MaxAttempts, failed.Attempts)
		require.Nil(t, failed.ClaimedUntil)
		require.Equal(t, "subscriber down", *failed.LastError)

		clk.Add(100 * time.Hour)
		n, err = r.RunOnce(ctxT(t))
		require.NoError(t, err)
		require.Zero(t, n, "a failed row is never claimed again")
		require.Equal(t, failed, getRow(t, db, id))
		require.EqualValues(t, cfg.MaxAttempts, calls.Load())
	})
}

// TestRelayWait: a handler that asks the row to wait (outbox.Wait) is asked
// again after the wait, however often, and the row is never dead-lettered:
// each wait gives back the attempt its claim took, even at the attempt limit.
func TestRelayWait(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)
		clk := newClock()
		cfg := testConfig()
		cfg.Now = clk.Now
		cfg.RetryBase, cfg.RetryMax, cfg.MaxAttempts = 100*time.Millisecond, time.Second, 2
		const wait = time.Minute // longer than RetryMax: a wait is not capped by it
		var calls atomic.Int32
		var waiting atomic.Bool
		r := newRelay(t, db, cfg, handle(func(_ context.Context, m outbox.Message) error {
			calls.Add(1)
			if !waiting.Swap(true) {
				return errors.New("broker down") // an ordinary failure: one attempt spent
			}
			return outbox.Wait(fmt.Errorf("attempt %d: duplicate window", m.Attempt), wait)
		}))
		id := appendEvents(t, db, thing{N: 1})[0]
		clk.Set(time.Now().UnixMilli())
		n, err := r.RunOnce(ctxT(t))
		require.NoError(t, err)
		require.Equal(t, 1, n)
		require.Equal(t, 1, getRow(t, db, id).Attempts)

		for i := range 5 { // more waits than attempts
			clk.Set(getRow(t, db, id).AvailableAt)
			n, err := r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, 1, n, "wait %d: claimed at its available_at", i)
			got := getRow(t, db, id)
			require.Nil(t, got.FailedAt, "wait %d: a wait at the last attempt is no dead letter", i)
			require.Equal(t, 1, got.Attempts, "wait %d: the attempt is given back", i)
			require.Equal(t, clk.Ms()+wait.Milliseconds(), got.AvailableAt, "wait %d: available after the wait, not RetryMax", i)
			require.Equal(t, "attempt 2: duplicate window", *got.LastError)
			require.Nil(t, got.ClaimedUntil)

			clk.Set(got.AvailableAt - 1)
			n, err = r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Zero(t, n, "wait %d: not claimed before the wait ends", i)
		}
		require.EqualValues(t, 6, calls.Load())
	})
}

func TestRelayFailures(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("a payload that does not decode fails at once", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			var called atomic.Bool
			r := newRelay(t, db, testConfig(), outbox.Subscribe(func(context.Context, outbox.Message, thing) error {
				called.Store(true)
				return nil
			}))
			id := insertRow(t, db, "Thing", `{"n":"not a number"}`)
			n, err := r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, 1, n)
			got := getRow(t, db, id)
			require.NotNil(t, got.FailedAt)
			require.Equal(t, 1, got.Attempts)
			require.Contains(t, *got.LastError, "decode Thing payload")
			require.Nil(t, got.ClaimedUntil)
			require.False(t, called.Load(), "the typed handler never sees a bad payload")
		})

		t.Run("a permanent error fails at once", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			r := newRelay(t, db, testConfig(), handle(func(context.Context, outbox.Message) error {
				return outbox.Permanent(errors.New("billing answered 400"))
			}))
			id := appendEvents(t, db, thing{N: 1})[0]
			_, err := r.RunOnce(ctxT(t))
			require.NoError(t, err)
			got := getRow(t, db, id)
			require.NotNil(t, got.FailedAt)
			require.Equal(t, 1, got.Attempts)
			require.Contains(t, *got.LastError, "billing answered 400")
		})

		t.Run("an unknown tag is retried, not failed at once", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			clk := newClock()
			cfg := testConfig()
			cfg.Now = clk.Now
			r := newRelay(t, db, cfg, handle(ok))
			id := insertRow(t, db, "Nobody", `{}`)
			clk.Set(time.Now().UnixMilli())

			n, err := r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, 1, n)
			got := getRow(t, db, id)
			require.Nil(t, got.FailedAt)
			require.Nil(t, got.ProcessedAt)
			require.Equal(t, 1, got.Attempts)
			require.Equal(t, "no subscriber for tag Nobody", *got.LastError)
			require.Greater(t, got.AvailableAt, clk.Ms())

			clk.Set(got.AvailableAt)
			n, err = r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, 1, n, "claimed again after its delay")
			require.Equal(t, 2, getRow(t, db, id).Attempts)
		})

		t.Run("a handler that outlives its timeout is a failed attempt", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			cfg := testConfig()
			cfg.HandlerTimeout = 50 * time.Millisecond
			unblock := make(chan struct{})
			t.Cleanup(func() { close(unblock) })
			r := newRelay(t, db, cfg, handle(func(context.Context, outbox.Message) error {
				<-unblock // ignores its context: the relay must not wait for it
				return nil
			}))
			id := appendEvents(t, db, thing{N: 1})[0]
			done := make(chan error, 1)
			go func() { _, err := r.RunOnce(ctxT(t)); done <- err }()
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("RunOnce waited for a handler past its timeout")
			}
			got := getRow(t, db, id)
			require.Nil(t, got.ProcessedAt)
			require.Nil(t, got.FailedAt)
			require.Nil(t, got.ClaimedUntil)
			require.Equal(t, 1, got.Attempts)
			require.Contains(t, *got.LastError, "deadline exceeded")
		})

		t.Run("a panic is a failed attempt and the relay keeps running", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			r := newRelay(t, db, testConfig(), outbox.Subscribe(func(_ context.Context, _ outbox.Message, e thing) error {
				if e.N == 666 {
					panic("handler bug")
				}
				return nil
			}))
			require.NoError(t, r.Start(ctxT(t)))
			bad := appendEvents(t, db, thing{N: 666})[0]
			require.Eventually(t, func() bool { return getRow(t, db, bad).Attempts == 1 && getRow(t, db, bad).LastError != nil },
				10*time.Second, 10*time.Millisecond)
			got := getRow(t, db, bad)
			require.Contains(t, *got.LastError, "panic in Thing handler: handler bug")
			require.Nil(t, got.FailedAt)
			require.Nil(t, got.ProcessedAt)

			good := appendEvents(t, db, thing{N: 1})[0]
			require.Eventually(t, func() bool { return getRow(t, db, good).ProcessedAt != nil },
				10*time.Second, 10*time.Millisecond, "the relay still delivers after the panic")
		})

		t.Run("the handlers of a tag run in order and all must succeed", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			var order []string
			var mu sync.Mutex
			step := func(name string, err error) outbox.Subscriber {
				return handle(func(context.Context, outbox.Message) error {
					mu.Lock()
					order = append(order, name)
					mu.Unlock()
					return err
				})
			}
			r := newRelay(t, db, testConfig(), step("first", nil), step("second", errors.New("second failed")), step("third", nil))
			id := appendEvents(t, db, thing{N: 1})[0]
			_, err := r.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, []string{"first", "second"}, order)
			got := getRow(t, db, id)
			require.Nil(t, got.ProcessedAt)
			require.Equal(t, "second failed", *got.LastError)
		})
	})
}

func TestRelayRecoversFromDatabaseOutage(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	const appName = "outbox_relay_outage_test"
	relayPool, err := postgres.Open(ctxT(t), withAppName(t, db.URL, appName))
	require.NoError(t, err)
	t.Cleanup(relayPool.Close)

	cfg := testConfig()
	// A settle cut off by a terminated backend leaves its row leased: keep the
	// lease short so the row comes back within the test.
	cfg.PollInterval, cfg.ClaimSize, cfg.HandlerTimeout, cfg.Lease = 10*time.Millisecond, 10, 50*time.Millisecond, 500*time.Millisecond
	r := newRelay(t, pg(relayPool), cfg, handle(ok))
	require.NoError(t, r.Start(ctxT(t)))

	// For a while, every backend of the relay's pool is terminated as soon as it
	// appears, while rows keep being appended through another pool.
	var terminated atomic.Int64
	stopKilling := make(chan struct{})
	killerDone := make(chan struct{})
	go func() {
		defer close(killerDone)
		for {
			select {
			case <-stopKilling:
				return
			case <-time.After(5 * time.Millisecond):
			}
			var n int64
			err := db.Pool.QueryRow(context.Background(), `
				SELECT count(*) FILTER (WHERE pg_terminate_backend(pid))
				FROM pg_stat_activity WHERE datname = $1 AND application_name = $2 AND pid <> pg_backend_pid()`,
				db.Name, appName).Scan(&n)
			if err == nil {
				terminated.Add(n)
			}
		}
	}()
	const rows = 100
	for i := range rows {
		appendEvents(t, pg(db.Pool), thing{N: i})
		time.Sleep(10 * time.Millisecond) // spread the appends over the outage
	}
	close(stopKilling)
	<-killerDone
	require.Positive(t, terminated.Load(), "the outage happened")
	t.Logf("terminated %d relay backends", terminated.Load())

	require.Eventually(t, func() bool { return count(t, pg(db.Pool), "processed_at IS NOT NULL") == rows },
		30*time.Second, 20*time.Millisecond, "the relay recovers without a restart")
}

func TestRelayStop(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("abandoned in-flight rows are released and another relay takes them at once", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			cfg := testConfig()
			cfg.HandlerTimeout, cfg.Lease = 10*time.Second, 10*time.Minute
			entered := make(chan uuid.UUID, 3)
			unblock := make(chan struct{})
			t.Cleanup(func() { close(unblock) })
			a := newRelay(t, db, cfg, handle(func(_ context.Context, m outbox.Message) error {
				entered <- m.ID
				<-unblock // ignores its context: Stop must not wait for it past its bound
				return nil
			}))
			ids := appendEvents(t, db, things(3)...)
			require.NoError(t, a.Start(ctxT(t)))
			for range ids {
				<-entered
			}
			for _, id := range ids {
				require.NotNil(t, getRow(t, db, id).ClaimedUntil)
			}

			// The handlers block until the test ends, so a Stop that waited for
			// them would run out of this bound and fail; 3s leaves the settle
			// and release room on a loaded machine (300ms did not, once, in CI).
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			require.NoError(t, a.Stop(ctx))
			for _, id := range ids {
				got := getRow(t, db, id)
				require.Nil(t, got.ClaimedUntil, "row %s released", id)
				require.Nil(t, got.ProcessedAt)
				require.Nil(t, got.FailedAt)
				require.Equal(t, 1, got.Attempts)
			}

			// "At once" means well inside the 10-minute lease. A's abandoned dispatches
			// may still be running their own (redundant, fenced) release for a moment,
			// and SKIP LOCKED passes over a row while that UPDATE holds it.
			b := newRelay(t, db, cfg, handle(ok))
			claimed := 0
			for deadline := time.Now().Add(5 * time.Second); claimed < 3 && time.Now().Before(deadline); {
				n, err := b.RunOnce(ctxT(t))
				require.NoError(t, err)
				claimed += n
			}
			require.Equal(t, 3, claimed, "another relay takes the released rows at once, despite the long lease")
			require.Equal(t, 3, count(t, db, "processed_at IS NOT NULL"))
		})

		t.Run("RunOnce releases the rows whose dispatch its context cut off", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			cfg := testConfig()
			cfg.HandlerTimeout, cfg.Lease = 10*time.Second, 10*time.Minute
			entered := make(chan struct{}, 2)
			r := newRelay(t, db, cfg, handle(func(ctx context.Context, _ outbox.Message) error {
				entered <- struct{}{}
				<-ctx.Done()
				return ctx.Err()
			}))
			ids := appendEvents(t, db, things(2)...)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { _, err := r.RunOnce(ctx); done <- err }()
			<-entered
			<-entered
			cancel()
			require.NoError(t, <-done)
			for _, id := range ids {
				got := getRow(t, db, id)
				require.Nil(t, got.ClaimedUntil, "released, not left leased")
				require.Nil(t, got.LastError, "an abandoned dispatch is not a failure")
				require.LessOrEqual(t, got.AvailableAt, time.Now().UnixMilli(), "available again at once")
			}
		})

		t.Run("dispatches that finish within the bound are settled", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			entered := make(chan struct{}, 3)
			r := newRelay(t, db, testConfig(), handle(func(context.Context, outbox.Message) error {
				entered <- struct{}{}
				time.Sleep(100 * time.Millisecond)
				return nil
			}))
			appendEvents(t, db, things(3)...)
			require.NoError(t, r.Start(ctxT(t)))
			for range 3 {
				<-entered
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			require.NoError(t, r.Stop(ctx))
			require.Equal(t, 3, count(t, db, "processed_at IS NOT NULL AND claimed_until IS NULL"))
		})

		t.Run("a stopped relay claims nothing more", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			r := newRelay(t, db, testConfig(), handle(ok))
			require.NoError(t, r.Start(ctxT(t)))
			require.NoError(t, r.Stop(ctxT(t)))
			id := appendEvents(t, db, thing{N: 1})[0]
			r.Nudge()
			// A second relay's claim proves the row was left untouched for it.
			b := newRelay(t, db, testConfig(), handle(ok))
			n, err := b.RunOnce(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, 1, n)
			require.Equal(t, 1, getRow(t, db, id).Attempts)
		})
	})
}

func TestRelayNudge(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)
		cfg := testConfig()
		cfg.PollInterval = time.Hour
		r := newRelay(t, db, cfg, handle(ok))

		first := appendEvents(t, db, thing{N: 1})[0]
		require.NoError(t, r.Start(ctxT(t)))
		require.Eventually(t, func() bool { return getRow(t, db, first).ProcessedAt != nil },
			10*time.Second, 10*time.Millisecond, "the first tick runs at start")

		// The relay now sleeps for an hour; only the nudge can wake it.
		second := appendEvents(t, db, thing{N: 2})[0]
		r.Nudge()
		r.Nudge() // never blocks, even with a wake-up pending
		require.Eventually(t, func() bool { return getRow(t, db, second).ProcessedAt != nil },
			10*time.Second, 10*time.Millisecond, "a nudge wakes the relay before its poll interval")
	})
}

func TestRelayFullBatch(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)
		cfg := testConfig()
		cfg.PollInterval, cfg.ClaimSize = time.Hour, 5
		r := newRelay(t, db, cfg, handle(ok))
		appendEvents(t, db, things(23)...)
		require.NoError(t, r.Start(ctxT(t)))
		require.Eventually(t, func() bool { return count(t, db, "processed_at IS NOT NULL") == 23 },
			10*time.Second, 10*time.Millisecond, "a full batch is followed by another claim at once, not a poll")
	})
}

func TestRelayFewerWorkersThanHalfAClaim(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		for _, workers := range []int{1, 4} {
			t.Run(fmt.Sprintf("%d workers with claim size 10 deliver every row", workers), func(t *testing.T) {
				t.Parallel()
				db := newDBOn(t, d)
				cfg := testConfig()
				cfg.PollInterval, cfg.ClaimSize, cfg.Workers = time.Hour, 10, workers
				r := newRelay(t, db, cfg, handle(ok))
				appendEvents(t, db, things(150)...)
				require.NoError(t, r.Start(ctxT(t)))
				// The poll is an hour away: only the claim after a full claim can
				// keep the relay going.
				require.Eventually(t, func() bool { return count(t, db, "processed_at IS NOT NULL") == 150 },
					60*time.Second, 20*time.Millisecond, "every row is delivered, however few the workers")
			})
		}
	})
}

func TestRelayLeasesDiffer(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)
		long := testConfig()
		long.Lease = 10 * time.Minute
		entered := make(chan struct{}, 1)
		release := make(chan struct{})
		var calls atomic.Int32
		a := newRelay(t, db, long, handle(func(ctx context.Context, _ outbox.Message) error {
			calls.Add(1)
			entered <- struct{}{}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}))
		id := appendEvents(t, db, thing{N: 1})[0]
		require.NoError(t, a.Start(ctxT(t)))
		<-entered

		// A replica started with a lease under half of a's (a rolling change of
		// OUTBOX_LEASE) sees a's claim lie more than twice its own lease ahead.
		short := testConfig()
		short.Lease, short.ClaimSize = time.Minute, 1
		b := newRelay(t, db, short, handle(func(context.Context, outbox.Message) error {
			calls.Add(1)
			return nil
		}))
		n, err := b.RunOnce(ctxT(t))
		require.NoError(t, err)
		require.Zero(t, n, "a live claim of another replica is never taken, whatever its lease")

		close(release)
		require.Eventually(t, func() bool { return getRow(t, db, id).ProcessedAt != nil },
			10*time.Second, 10*time.Millisecond)
		require.Equal(t, int32(1), calls.Load(), "dispatched once")
		require.Equal(t, 1, getRow(t, db, id).Attempts)
	})
}

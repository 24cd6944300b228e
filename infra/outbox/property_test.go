package outbox_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// What a subscriber does on one attempt of a row.
type behaviour int

const (
	succeeds     behaviour = iota
	failsOnce              // a transient error
	hangs                  // until its context ends (the handler timeout)
	ignoresCtx             // past the handler timeout, ignoring its context
	failsForGood           // a permanent error
)

func (b behaviour) String() string {
	return [...]string{"succeeds", "fails", "hangs", "ignores-ctx", "fails-for-good"}[b]
}

// drawBehaviour weights the draw so that hangs, which cost a handler timeout
// each, are a fifth of the attempts.
var drawBehaviour = rapid.Custom(func(t *rapid.T) behaviour {
	switch n := rapid.IntRange(0, 9).Draw(t, "b"); {
	case n < 4:
		return succeeds
	case n < 7:
		return failsOnce
	case n == 7:
		return hangs
	case n == 8:
		return ignoresCtx
	default:
		return failsForGood
	}
})

// propertyChecks is how many configurations one run tries unless
// -rapid.checks says otherwise: each runs a relay for a second or two.
const propertyChecks = 30

// TestRelayPropertyEveryAcceptedSetting runs a relay on real PostgreSQL under
// settings drawn from what the configuration accepts (what infra/env's Relay
// accepts; scaled down so a case takes a second or two: durations in
// milliseconds where the service reads seconds or minutes, the lease near its
// 1s minimum, claim size and workers up to 40 and 16 of their 1000),
// against subscribers whose every attempt succeeds, fails, hangs past the
// handler timeout (honouring its context or not) or fails for good. Every row
// must end processed at the first attempt that succeeds, or dead-lettered at
// the first that fails for good or else at exactly its max attempts, each
// attempt dispatched once, within a bound computed from the settings. A
// failing case prints its seed and shrinks.
func TestRelayPropertyEveryAcceptedSetting(t *testing.T) {
	t.Parallel()
	// rapid reads its settings from the global flags: set them here, before
	// the per-dialect subtests run in parallel, never inside them (a Set in
	// one beside rapid's read in the other is a data race).
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["rapid.checks"] {
		require.NoError(t, flag.Set("rapid.checks", strconv.Itoa(propertyChecks)))
	}
	if !set["rapid.seed"] {
		require.NoError(t, flag.Set("rapid.seed", strconv.FormatUint(rand.Uint64N(1<<53)+1, 10)))
	}
	t.Logf("rapid seed %s (rerun with -rapid.seed=%[1]s)", flag.Lookup("rapid.seed").Value)
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := newDBOn(t, d)
		cases := 0
		start := time.Now()
		rapid.Check(t, func(rt *rapid.T) {
			cases++
			runPropertyCase(t, rt, db)
		})
		t.Logf("%d cases in %s", cases, time.Since(start).Round(time.Millisecond))
	})
}

// drawConfig draws the relay's settings as an operator would set them (the
// OUTBOX_* variables) and requires the relay's own rules (Config.Validate,
// whose rules infra/env's Relay applies to them) to accept them: they are drawn within
// its bounds and rules.
func drawConfig(rt *rapid.T) outbox.Config {
	ms := func(name string, lo, hi int) (int, time.Duration) {
		n := rapid.IntRange(lo, hi).Draw(rt, name+" ms")
		return n, time.Duration(n) * time.Millisecond
	}
	cfg := outbox.DefaultConfig()
	// Claims larger than the workers too: a claim takes only the free ones.
	cfg.ClaimSize = rapid.IntRange(1, 40).Draw(rt, "OUTBOX_CLAIM_SIZE")
	cfg.Workers = rapid.IntRange(1, 16).Draw(rt, "OUTBOX_WORKERS")
	timeout, v := ms("OUTBOX_HANDLER_TIMEOUT", 20, 200)
	cfg.HandlerTimeout = v
	// The lease rule: one handler timeout, whatever the claim size.
	least := max(timeout, int(outbox.MinLease.Milliseconds()))
	_, cfg.Lease = ms("OUTBOX_LEASE", least, 3*least)
	_, cfg.PollInterval = ms("OUTBOX_POLL_INTERVAL", 5, 200)
	cfg.Notify = rapid.Bool().Draw(rt, "OUTBOX_NOTIFY")
	cfg.MaxAttempts = rapid.IntRange(1, 4).Draw(rt, "OUTBOX_MAX_ATTEMPTS")
	base, v := ms("OUTBOX_RETRY_BASE", 5, 100)
	cfg.RetryBase = v
	_, cfg.RetryMax = ms("OUTBOX_RETRY_MAX", base, 4*base)
	require.NoError(rt, cfg.Validate(), "drawn within what the configuration accepts: %+v", cfg)
	return cfg
}

func runPropertyCase(t *testing.T, rt *rapid.T, pool *dbtest.DB) {
	cfg := drawConfig(rt)
	timeout := cfg.HandlerTimeout
	scripts := rapid.SliceOfN(rapid.SliceOfN(drawBehaviour, cfg.MaxAttempts, cfg.MaxAttempts), 1, 16).Draw(rt, "rows")

	// Each case starts from an empty table.
	pool.Exec(t, `DELETE FROM outbox_events`)

	var (
		mu    sync.Mutex
		calls = map[uuid.UUID]int{}
		index = map[uuid.UUID]int{}
	)
	subscriber := handle(func(ctx context.Context, m outbox.Message) error {
		mu.Lock()
		calls[m.ID]++
		script := scripts[index[m.ID]]
		mu.Unlock()
		if m.Attempt < 1 || m.Attempt > len(script) {
			return outbox.Permanent(fmt.Errorf("attempt %d is outside 1..%d", m.Attempt, len(script)))
		}
		switch script[m.Attempt-1] {
		case succeeds:
			return nil
		case failsOnce:
			return errors.New("transient")
		case hangs:
			<-ctx.Done()
			return ctx.Err()
		case ignoresCtx:
			time.Sleep(timeout + 50*time.Millisecond)
			return nil // too late: the attempt was already counted as failed
		default:
			return outbox.Permanent(errors.New("refused"))
		}
	})
	r, err := outbox.NewRelay(outbox.NewStore(pool.DB), cfg, []outbox.Subscriber{subscriber}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(rt, err, "every setting the configuration accepts starts")

	// Appended in one transaction before the relay starts: the index must be
	// filled before any dispatch reads it.
	ids := appendEvents(t, pool, things(len(scripts))...)
	for i, id := range ids {
		index[id] = i
	}
	require.NoError(rt, r.Start(context.Background()))
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		require.NoError(rt, r.Stop(ctx))
	}()

	bound := propertyBound(cfg, scripts)
	deadline := time.Now().Add(bound)
	for count(t, pool, "processed_at IS NULL AND failed_at IS NULL") > 0 {
		if time.Now().After(deadline) {
			var pending []string
			for _, x := range allRows(t, pool) {
				if x.ProcessedAt == nil && x.FailedAt == nil {
					pending = append(pending, fmt.Sprintf("%s (attempts %d, claimed %v)", x.Payload, x.Attempts, x.ClaimedUntil != nil))
				}
			}
			rt.Fatalf("rows still pending after %s (the bound for these settings): %v", bound, pending)
		}
		time.Sleep(10 * time.Millisecond)
	}

	for i, id := range ids {
		got := getRow(t, pool, id)
		wantProcessed, wantAttempts := expectedEnd(scripts[i], cfg.MaxAttempts)
		require.Equal(rt, wantProcessed, got.ProcessedAt != nil, "row %d %v: processed", i, scripts[i])
		require.Equal(rt, !wantProcessed, got.FailedAt != nil, "row %d %v: dead-lettered", i, scripts[i])
		require.Equal(rt, wantAttempts, got.Attempts, "row %d %v: attempts", i, scripts[i])
		require.Nil(rt, got.ClaimedUntil, "row %d: no claim left", i)
		mu.Lock()
		n := calls[id]
		mu.Unlock()
		require.Equal(rt, wantAttempts, n, "row %d %v: one dispatch an attempt", i, scripts[i])
	}
}

// expectedEnd is where a row's script leads: processed at the first attempt
// that succeeds, dead-lettered at the first that fails for good, or else at
// the last attempt.
func expectedEnd(script []behaviour, maxAttempts int) (processed bool, attempts int) {
	for i, b := range script {
		switch b {
		case succeeds:
			return true, i + 1
		case failsForGood:
			return false, i + 1
		}
	}
	return false, maxAttempts
}

// propertyBound is the longest every row may take under cfg: per attempt a
// dispatch, its retry delay, a sweep of the scan floor (a retried row lies
// below it) and a poll; the handler timeouts of all hanging attempts shared
// among the workers; and a slack for a machine shared with other tests.
func propertyBound(cfg outbox.Config, scripts [][]behaviour) time.Duration {
	sweep := min(max(5*cfg.PollInterval, time.Second), 30*time.Second)
	var perRow time.Duration
	for a := 1; a <= cfg.MaxAttempts; a++ {
		_, hi := outbox.RetryDelayRange(a, cfg.RetryBase, cfg.RetryMax)
		perRow += cfg.HandlerTimeout + hi + sweep + cfg.PollInterval
	}
	hanging := 0
	for _, s := range scripts {
		for _, b := range s {
			if b == hangs || b == ignoresCtx {
				hanging++
			}
		}
	}
	queued := time.Duration((hanging+cfg.Workers-1)/cfg.Workers) * (cfg.HandlerTimeout + 50*time.Millisecond)
	return perRow + queued + 5*time.Second
}

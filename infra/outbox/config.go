package outbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/acme/outboxpair/infra/config"
)

// Config tunes a relay. The handler timeout must not exceed the lease (the
// contract's rule): a claim takes no more rows than there are free workers, so
// every claimed row starts at once and has its whole lease for one dispatch,
// whatever the claim size. Beyond it, the relay keeps a fifth of every lease for
// the claim and the settle (LeaseMargin): a dispatch is cut off at the handler
// timeout or a margin before its lease ends, whichever comes first, so every
// row is settled or released before its lease runs out.
type Config struct {
	PollInterval       time.Duration // wake period; failed ticks back off from it (doubling, up to 30× it and at most 30s)
	ClaimSize          int           // rows claimed per statement, at most
	HandlerTimeout     time.Duration // bound of one row's dispatch
	Lease              time.Duration // how long a claim is held
	MaxAttempts        int           // attempts before a row gets failed_at; a claim never settled counts
	RetryBase          time.Duration // durable delay after the first failed attempt
	RetryMax           time.Duration // cap of the durable delay
	ProcessedRetention time.Duration // processed rows older than this are deleted

	// Workers is how many rows one relay has in flight at once (its long-lived
	// workers); 0 means ClaimSize. A claim takes at most ClaimSize rows and only
	// as many as there are free workers, so every claimed row starts at once and
	// the lease rule holds per row whatever the two numbers are. More workers
	// than ClaimSize let a consumer that waits on its own commit (Billing: one
	// fsync per event) be called concurrently enough for group commit to work.
	Workers int

	// Notify makes relays tell each other about appends: Nudge also sends a
	// pg_notify (after the appending commit), and the relay LISTENs on a
	// connection of its own, so a row appended on any replica is claimed at
	// once by a relay with a free slot. Off, a relay finds other replicas' rows
	// at its next poll. On SQLite (no LISTEN/NOTIFY) it has no effect: Nudge
	// wakes only this process's relay. LISTEN needs a session: turn it off behind a pooler in
	// transaction mode (PgBouncer).
	Notify bool

	// Now is the relay's clock (nil means time.Now). Tests move it forward to make
	// a retried row available without waiting for its delay.
	Now func() time.Time
}

// workers is the in-flight bound: Workers, or ClaimSize when it is 0.
func (c Config) workers() int {
	if c.Workers > 0 {
		return c.Workers
	}
	return c.ClaimSize
}

// LeaseMargin is the part of the lease kept for the claim and the settle. The
// relay enforces it per row: a row's dispatch is cut off a margin before its
// lease ends (a handler timeout above Lease − LeaseMargin is shortened to it),
// and a row that waited that long for a worker is released undispatched.
func LeaseMargin(lease time.Duration) time.Duration { return lease / 5 }

func (c Config) validate() error {
	var errs []error
	positive := func(name string, ok bool, v any) {
		if !ok {
			errs = append(errs, fmt.Errorf("%s must be positive, got %v", name, v))
		}
	}
	positive("poll interval", c.PollInterval > 0, c.PollInterval)
	positive("claim size", c.ClaimSize > 0, c.ClaimSize)
	positive("handler timeout", c.HandlerTimeout > 0, c.HandlerTimeout)
	positive("lease", c.Lease > 0, c.Lease)
	positive("max attempts", c.MaxAttempts > 0, c.MaxAttempts)
	positive("retry base", c.RetryBase > 0, c.RetryBase)
	positive("processed retention", c.ProcessedRetention > 0, c.ProcessedRetention)
	if c.Workers < 0 {
		errs = append(errs, fmt.Errorf("workers must not be negative, got %d", c.Workers))
	}
	if len(errs) == 0 {
		if c.RetryMax < c.RetryBase {
			errs = append(errs, fmt.Errorf("retry max (%s) is less than retry base (%s)", c.RetryMax, c.RetryBase))
		}
		if c.HandlerTimeout > c.Lease {
			errs = append(errs, fmt.Errorf("handler timeout (%s) exceeds the lease (%s)", c.HandlerTimeout, c.Lease))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("outbox: invalid relay config: %w", err)
	}
	return nil
}

// ConfigFrom is the relay's Config as labeling's settings give it (the
// OUTBOX_* variables, infra/config): the one mapping serve, the property test
// and the benchmark all use, so a setting added to one is added to all.
func ConfigFrom(c config.Labeling) Config {
	return Config{
		PollInterval:       c.PollInterval,
		ClaimSize:          c.ClaimSize,
		Workers:            c.Workers,
		HandlerTimeout:     c.HandlerTimeout,
		Lease:              c.Lease,
		MaxAttempts:        c.MaxAttempts,
		RetryBase:          c.RetryBase,
		RetryMax:           c.RetryMax,
		ProcessedRetention: c.ProcessedRetention,
		Notify:             c.OutboxNotify,
	}
}

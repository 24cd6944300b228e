package outbox

import (
	"errors"
	"fmt"
	"time"
)

// Config tunes a relay. Claim size × handler timeout must not exceed the lease
// (the contract's rule). Beyond it, the relay keeps a fifth of every lease for
// the claim and the settle (LeaseMargin): a dispatch is cut off at the handler
// timeout or a margin before its lease ends, whichever comes first, so every
// row is settled or released before its lease runs out.
type Config struct {
	PollInterval       time.Duration // wake period; failed ticks back off from it (doubling, up to 30× it and at most 30s)
	ClaimSize          int           // rows claimed per statement; also the rows in flight at once per relay, and its workers
	HandlerTimeout     time.Duration // bound of one row's dispatch
	Lease              time.Duration // how long a claim is held
	MaxAttempts        int           // attempts before a row gets failed_at; a claim never settled counts
	RetryBase          time.Duration // durable delay after the first failed attempt
	RetryMax           time.Duration // cap of the durable delay
	ProcessedRetention time.Duration // processed rows older than this are deleted

	// Notify makes relays tell each other about appends: Nudge also sends a
	// pg_notify (after the appending commit), and the relay LISTENs on a
	// connection of its own, so a row appended on any replica is claimed at
	// once by a relay with a free slot. Off, a relay finds other replicas' rows
	// at its next poll. LISTEN needs a session: turn it off behind a pooler in
	// transaction mode (PgBouncer).
	Notify bool

	// Now is the relay's clock (nil means time.Now). Tests move it forward to make
	// a retried row available without waiting for its delay.
	Now func() time.Time
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
	if len(errs) == 0 {
		if c.RetryMax < c.RetryBase {
			errs = append(errs, fmt.Errorf("retry max (%s) is less than retry base (%s)", c.RetryMax, c.RetryBase))
		}
		// Compared by division: the product of absurd values would overflow.
		if c.HandlerTimeout > c.Lease/time.Duration(c.ClaimSize) {
			errs = append(errs, fmt.Errorf("claim size × handler timeout (%d × %s) exceeds the lease (%s)",
				c.ClaimSize, c.HandlerTimeout, c.Lease))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("outbox: invalid relay config: %w", err)
	}
	return nil
}

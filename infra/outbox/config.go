package outbox

import (
	"fmt"
	"time"
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

// The defaults of a relay's settings (the OUTBOX_* variables' defaults,
// contract section 1): DefaultConfig returns them.
const (
	DefaultPollInterval   = time.Second
	DefaultHandlerTimeout = 30 * time.Second
	DefaultLease          = 5 * time.Minute
	DefaultMaxAttempts    = 10
	DefaultRetryBase      = 5 * time.Second
	DefaultRetryMax       = 15 * time.Minute
	// DefaultProcessedRetention is a week.
	DefaultProcessedRetention = 168 * time.Hour
	DefaultNotify             = true
	// DefaultWorkers: rows in flight per relay. Billing commits once per
	// event, so its throughput grows with the deliveries it is given at once
	// (group commit); 40 keeps its pool busy with room to spare.
	DefaultWorkers = 40
	// DefaultClaimSize is DefaultWorkers: a claim never takes more rows than
	// the relay has free workers, so a larger claim size changes nothing at the
	// default workers, and with this one a relay whose workers are all free
	// fills them in one statement. It was 10 until issue 20, when the lease
	// rule was claim size × handler timeout ≤ lease.
	DefaultClaimSize = DefaultWorkers
)

// The bounds Validate holds a setting to. An upper bound keeps an absurd value
// (a typo, an extra digit) from starting a relay that misbehaves later: each
// is far above any sensible setting.
const (
	// MaxClaimSize bounds ClaimSize and Workers.
	MaxClaimSize = 1000
	MaxAttempts  = 1000
	// MaxShortDuration bounds PollInterval, HandlerTimeout and RetryBase.
	MaxShortDuration = 24 * time.Hour
	// MaxLongDuration (ten years) bounds Lease, RetryMax and ProcessedRetention.
	MaxLongDuration = 10 * 365 * 24 * time.Hour
	// MinLease is the least Lease. The relay keeps a fifth of every lease for
	// recording each row's outcome (LeaseMargin); below 200ms a settle on a
	// busy database may land after the lease, the row is claimed again and its
	// attempts are spent on claims whose outcome was fenced off.
	MinLease = time.Second
)

// DefaultConfig is a relay with every setting at its default.
func DefaultConfig() Config {
	return Config{
		PollInterval:       DefaultPollInterval,
		ClaimSize:          DefaultClaimSize,
		Workers:            DefaultWorkers,
		HandlerTimeout:     DefaultHandlerTimeout,
		Lease:              DefaultLease,
		MaxAttempts:        DefaultMaxAttempts,
		RetryBase:          DefaultRetryBase,
		RetryMax:           DefaultRetryMax,
		ProcessedRetention: DefaultProcessedRetention,
		Notify:             DefaultNotify,
	}
}

// The lease rule. A claimed row must be done with (dispatched and settled)
// before its claim's lease runs out, or another relay takes it and it is
// delivered twice. Each row in flight finishes within the handler timeout T
// (the relay cuts it off then), once a worker takes it. With W workers running
// a claim of C rows one after another, the last row of the claim would start
// after ceil(C/W) − 1 timeouts at worst and finish by ceil(C/W) × T. The relay
// never claims more rows than it has free workers (C ≤ free ≤ W), so
// ceil(C/W) = 1: every row of a claim starts when the claim returns, and the
// lease must cover one timeout, T ≤ Lease, whatever ClaimSize is. (The rule
// this replaces, claim size × T ≤ lease, assumed the rows of a claim ran one
// after another, and made a claim of more than 10 rows illegal at the default
// timeout.) The relay keeps a fifth of each lease for the claim and the settle
// on top (LeaseMargin): a dispatch is cut off at four fifths of the lease if T
// is longer.

// Validate reports the first setting of c that a relay refuses, as
// "Field: what is wrong" (the Config field's name): Check with the fields'
// own names. It holds every rule of contract section 1 for the OUTBOX_*
// variables: each value positive and within its bound, Lease at least
// MinLease, RetryMax at least RetryBase, and the lease rule.
func (c Config) Validate() error { return c.Check(FieldName) }

// FieldName names a Config field by itself, for Validate.
func FieldName(field string) string { return field }

// Check is Validate with each field named by name(field), for a caller that
// calls the settings otherwise, so one wording serves every caller: the
// message starts with the name of the setting to change. infra/env's Relay
// words the same rules with the OUTBOX_* variables' names: change both
// together.
func (c Config) Check(name func(field string) string) error { return c.check(name, true) }

// check holds the rules in the order a setting is refused: a value out of its
// range for that range, before what it breaks further on. Without bounds it
// holds only the rules without which a relay cannot keep its guarantees, the
// ones NewRelay enforces (tests run relays with leases under MinLease): every
// value positive, RetryMax at least RetryBase, and the lease rule.
func (c Config) check(name func(field string) string, bounds bool) error {
	for _, p := range []struct {
		field string
		ok    bool
		v     any
	}{
		{"PollInterval", c.PollInterval > 0, c.PollInterval},
		{"ClaimSize", c.ClaimSize > 0, c.ClaimSize},
		{"HandlerTimeout", c.HandlerTimeout > 0, c.HandlerTimeout},
		{"Lease", c.Lease > 0, c.Lease},
		{"MaxAttempts", c.MaxAttempts > 0, c.MaxAttempts},
		{"RetryBase", c.RetryBase > 0, c.RetryBase},
		{"ProcessedRetention", c.ProcessedRetention > 0, c.ProcessedRetention},
	} {
		if !p.ok {
			return fmt.Errorf("%s: %v must be positive", name(p.field), p.v)
		}
	}
	if c.Workers < 0 {
		return fmt.Errorf("%s: %d must not be negative (0 is ClaimSize)", name("Workers"), c.Workers)
	}
	if bounds {
		if err := c.checkBounds(name); err != nil {
			return err
		}
	}
	if c.RetryMax < c.RetryBase {
		return fmt.Errorf("%s: %s is less than %s (%s)", name("RetryMax"), c.RetryMax, name("RetryBase"), c.RetryBase)
	}
	if bounds && c.Lease < MinLease {
		return fmt.Errorf("%s: %s is less than the minimum of %s (a fifth of the lease is kept for recording each outcome)",
			name("Lease"), c.Lease, MinLease)
	}
	if c.HandlerTimeout > c.Lease {
		return fmt.Errorf("%s: %s is shorter than %s (%s): a claim takes no more rows than %s has free, so each claimed row starts at once and must finish within the lease",
			name("Lease"), c.Lease, name("HandlerTimeout"), c.HandlerTimeout, name("Workers"))
	}
	return nil
}

// checkBounds holds each value under its maximum.
func (c Config) checkBounds(name func(field string) string) error {
	for _, n := range []struct {
		field    string
		v, limit int
	}{
		{"ClaimSize", c.ClaimSize, MaxClaimSize},
		{"Workers", c.Workers, MaxClaimSize},
		{"MaxAttempts", c.MaxAttempts, MaxAttempts},
	} {
		if n.v > n.limit {
			return fmt.Errorf("%s: %d is more than the maximum of %d", name(n.field), n.v, n.limit)
		}
	}
	for _, d := range []struct {
		field    string
		v, limit time.Duration
	}{
		{"PollInterval", c.PollInterval, MaxShortDuration},
		{"HandlerTimeout", c.HandlerTimeout, MaxShortDuration},
		{"RetryBase", c.RetryBase, MaxShortDuration},
		{"Lease", c.Lease, MaxLongDuration},
		{"RetryMax", c.RetryMax, MaxLongDuration},
		{"ProcessedRetention", c.ProcessedRetention, MaxLongDuration},
	} {
		if d.v > d.limit {
			return fmt.Errorf("%s: %s is more than the maximum of %s", name(d.field), d.v, d.limit)
		}
	}
	return nil
}

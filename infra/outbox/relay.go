package outbox

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Config tunes a relay. Claim size × handler timeout must not exceed the lease, so
// a batch whose rows all time out is still settled before its lease runs out.
type Config struct {
	PollInterval       time.Duration // wake period; failed ticks back off from it
	ClaimSize          int           // rows claimed per statement
	HandlerTimeout     time.Duration // bound of one row's dispatch
	Lease              time.Duration // how long a claim is held
	MaxAttempts        int           // attempts before a row gets failed_at
	RetryBase          time.Duration // durable delay after the first failed attempt
	RetryMax           time.Duration // cap of the durable delay
	ProcessedRetention time.Duration // processed rows older than this are deleted
}

// Relay claims pending rows and hands them to their subscribers. Any number of
// relays may run on one table at once, in one process or many, with no leader.
type Relay struct {
	pool   *pgxpool.Pool
	cfg    Config
	subs   map[string][]Handler
	logger *slog.Logger
}

// NewRelay returns a relay over pool that dispatches to subs. It fails when cfg is
// invalid, naming the values.
func NewRelay(pool *pgxpool.Pool, cfg Config, subs []Subscriber, logger *slog.Logger) (*Relay, error) {
	return nil, errors.New("TODO")
}

// Start runs the relay in the background until Stop.
func (r *Relay) Start(context.Context) error { return errors.New("TODO") }

// Stop stops claiming, lets in-flight dispatches finish until ctx ends, then
// abandons them and releases every claim it did not settle.
func (r *Relay) Stop(ctx context.Context) error { return errors.New("TODO") }

// Nudge wakes the relay at once. It never blocks.
func (r *Relay) Nudge() {}

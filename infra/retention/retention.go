// Package retention deletes rows past their age, table by table, on every replica
// with no lease: each delete is idempotent, so replicas that run at once do no harm.
// Each slice registers a Policy for the tables it owns.
package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/fx"
)

// Policy is the retention of one table.
type Policy struct {
	Name string        // the table, for logs and metrics
	Keep time.Duration // rows older than this are deleted
	// Delete deletes at most limit rows older than before (epoch ms) and returns how
	// many it deleted. Its SQL lives beside the table's owner, in the store of
	// the database's dialect.
	Delete func(ctx context.Context, before int64, limit int) (int64, error)
}

// DefaultChunk is the most rows one delete statement removes when Config.Chunk is 0.
const DefaultChunk = 1000

// DefaultInterval is how often retention runs when Config.Interval is not
// set otherwise (CLEANUP_INTERVAL's default).
const DefaultInterval = time.Hour

// Config tunes the cleanup.
type Config struct {
	Interval time.Duration // how often retention runs
	// Chunk is the most rows one delete statement removes (0 means DefaultChunk).
	// Small chunks keep each statement's locks and WAL burst short on a big table.
	Chunk int
	// Now is the cleanup's clock (nil means time.Now).
	Now func() time.Time
}

// Validate reports a negative Interval or Chunk as "Field: what is wrong".
func (c Config) Validate() error {
	switch {
	case c.Interval < 0:
		return fmt.Errorf("%s: %s must not be negative", "Interval", c.Interval)
	case c.Chunk < 0:
		return fmt.Errorf("%s: %d must not be negative", "Chunk", c.Chunk)
	}
	return nil
}

var (
	deletedRows = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "retention_deleted_rows_total",
		Help: "Rows deleted by retention, by table.",
	}, []string{"table"})
	runErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "retention_errors_total",
		Help: "Retention runs of a table that stopped on an error (retried next interval).",
	}, []string{"table"})
)

func init() {
	prometheus.MustRegister(deletedRows, runErrors)
}

// Cleanup runs every registered Policy once at start and then each interval.
type Cleanup struct {
	cfg      Config
	policies []Policy
	logger   *slog.Logger
	now      func() time.Time

	mu       sync.Mutex
	started  bool
	stopOnce sync.Once
	stopping chan struct{}
	cancel   context.CancelFunc
	ctx      context.Context
	done     chan struct{}
}

// Params are the cleanup's fx inputs; slices add policies to the "retention" group.
type Params struct {
	fx.In
	Config   Config
	Policies []Policy `group:"retention"`
	Logger   *slog.Logger
}

// New returns a cleanup of policies (each deletes through its own store).
func New(cfg Config, policies []Policy, logger *slog.Logger) *Cleanup {
	if cfg.Chunk <= 0 {
		cfg.Chunk = DefaultChunk
	}
	if logger == nil {
		logger = slog.Default()
	}
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Cleanup{
		cfg:      cfg,
		policies: policies,
		logger:   logger.With("component", "retention"),
		now:      now,
		stopping: make(chan struct{}),
		ctx:      ctx,
		cancel:   cancel,
		done:     make(chan struct{}),
	}
}

// Start runs the cleanup in the background until Stop: once at once, then every
// Interval. A failed run is logged at Warn and retried at the next interval; it
// never stops the process.
func (c *Cleanup) Start(context.Context) error {
	if c.cfg.Interval <= 0 {
		return fmt.Errorf("retention: interval must be positive, got %s", c.cfg.Interval)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.started {
		return errors.New("retention: cleanup already started")
	}
	select {
	case <-c.stopping:
		return errors.New("retention: cleanup already stopped")
	default:
	}
	c.started = true
	go c.loop()
	return nil
}

func (c *Cleanup) loop() {
	defer close(c.done)
	ticker := time.NewTicker(c.cfg.Interval)
	defer ticker.Stop()
	for {
		deleted, err := c.RunOnce(c.ctx)
		if err != nil && c.ctx.Err() == nil {
			c.logger.Warn("retention run failed; retrying at the next interval", "err", err, "deleted", deleted)
		} else if err == nil {
			c.logger.Info("retention run done", "deleted", deleted)
		}
		select {
		case <-c.stopping:
			return
		case <-ticker.C:
		}
	}
}

// Stop stops the cleanup and waits for a run in progress to end or ctx to end. A
// run in progress is cancelled: the statement it was running rolls back, and the
// rows it left are deleted next time.
func (c *Cleanup) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() { close(c.stopping) })
	c.cancel()
	c.mu.Lock()
	started := c.started
	c.mu.Unlock()
	if !started {
		return nil
	}
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("retention: stop: %w", ctx.Err())
	}
}

// RunOnce applies every policy once and returns the rows deleted per policy name.
// Each policy deletes in chunks until a chunk comes back short. A policy that
// fails does not keep the others from running; the error joins every failure.
func (c *Cleanup) RunOnce(ctx context.Context) (map[string]int64, error) {
	deleted := make(map[string]int64, len(c.policies))
	var errs []error
	for _, p := range c.policies {
		n, err := c.apply(ctx, p)
		deleted[p.Name] += n
		deletedRows.WithLabelValues(p.Name).Add(float64(n))
		if err != nil {
			runErrors.WithLabelValues(p.Name).Inc()
			errs = append(errs, fmt.Errorf("retention of %s: %w", p.Name, err))
		}
	}
	return deleted, errors.Join(errs...)
}

func (c *Cleanup) apply(ctx context.Context, p Policy) (int64, error) {
	if p.Keep <= 0 || p.Delete == nil {
		// A zero Keep would delete every row up to now: refuse rather than guess.
		return 0, fmt.Errorf("invalid policy (keep %s, delete set %t)", p.Keep, p.Delete != nil)
	}
	before := c.now().Add(-p.Keep).UnixMilli()
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := p.Delete(ctx, before, c.cfg.Chunk)
		total += n
		if err != nil {
			return total, err
		}
		if n < int64(c.cfg.Chunk) {
			return total, nil
		}
	}
}

// StopShare is the cleanup's share of the stop budget (contract section 5).
var StopShare = stopbudget.Share{Name: "retention", Timeout: 2 * time.Second}

// Module provides the cleanup of every Policy in the "retention" group, started
// and stopped with the app; its stop takes at most StopShare.
var Module = stopbudget.Module(StopShare, fx.Module("retention",
	fx.Provide(func(p Params) *Cleanup { return New(p.Config, p.Policies, p.Logger) }),
	fx.Invoke(func(lc fx.Lifecycle, c *Cleanup) {
		lc.Append(fx.Hook{OnStart: c.Start, OnStop: c.Stop})
	}),
))

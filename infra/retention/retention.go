// Package retention deletes rows past their age, table by table, on every replica
// with no lease: each delete is idempotent, so replicas that run at once do no harm.
// Each slice registers a Policy for the tables it owns.
package retention

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"
)

// Policy is the retention of one table.
type Policy struct {
	Name string        // the table, for logs and metrics
	Keep time.Duration // rows older than this are deleted
	// Delete deletes at most limit rows older than before (epoch ms) and returns how
	// many it deleted. Its SQL lives beside the table's owner.
	Delete func(ctx context.Context, pool *pgxpool.Pool, before int64, limit int) (int64, error)
}

// Config tunes the cleanup.
type Config struct {
	Interval time.Duration // how often retention runs
}

// Cleanup runs every registered Policy each interval.
type Cleanup struct{}

// Params are the cleanup's fx inputs; slices add policies to the "retention" group.
type Params struct {
	fx.In
	Pool     *pgxpool.Pool
	Config   Config
	Policies []Policy `group:"retention"`
	Logger   *slog.Logger
}

// New returns a cleanup of policies over pool.
func New(pool *pgxpool.Pool, cfg Config, policies []Policy, logger *slog.Logger) *Cleanup {
	return &Cleanup{}
}

// Start runs the cleanup in the background until Stop.
func (c *Cleanup) Start(context.Context) error { return errors.New("TODO") }

// Stop stops the cleanup and waits for a run in progress to end or ctx to end.
func (c *Cleanup) Stop(context.Context) error { return errors.New("TODO") }

// Module provides the cleanup, started and stopped with the app.
var Module = fx.Module("retention")

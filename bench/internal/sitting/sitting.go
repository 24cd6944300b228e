// Package sitting is what every measurement of one sitting shares: the
// options, the results, the relay settings the binaries run with, and where
// its fresh databases are made: a PostgreSQL server's (Env), or with -sqlite a
// directory of SQLite files (Files).
package sitting

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/acme/outboxpair/bench/internal/report"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
)

// Options are the flags of a run (main parses and checks them), one field per
// flag: DB is -db, HTTPBacklog -http-backlog, NATSSyncAlways
// -nats-sync-always, PGDefaults -pg-defaults, and so on; their meanings are
// the flags'.
type Options struct {
	DB               string
	Root             string
	Rounds           int
	Only             string
	Backlog          int
	Small, Big       int
	ScaleAnalyzed    bool
	ConsumerBacklog  int
	HTTPBacklog      int
	Rates            []int
	LatencyDuration  time.Duration
	LatencyGrace     time.Duration
	ProducerDuration time.Duration
	PgbenchDuration  time.Duration
	Settled          int
	ClaimBatches     int
	DrainLimit       time.Duration
	NATS             string
	NATSServer       string
	NATSSyncAlways   bool
	RelaySet         string
	SQLite           bool
	River            []string // River variants beside the project (river.Variants' names)
	PGDefaults       bool
}

// Sitting is one sitting's shared state. Its measurements run one at a time.
type Sitting struct {
	Opt         Options
	Res         *report.Results // the sitting's figures and notes
	Relay       outbox.Config   // the binaries' relay, -relay-set applied
	Tmp         string          // temporary directory: binaries, logs, scripts
	Bin         string          // where the binaries are built
	PgbenchPath string          // pgbench, when a workload runs it
	Env         *Env            // PostgreSQL: the -db server's databases (nil with -sqlite)
	Files       *Files          // -sqlite: the run's SQLite files (nil without)
	LiteBounds  sqldb.Bounds    // -sqlite: the binaries' database bounds, for every file opened here
}

// New is a sitting with o's options in tmp: the relay labeling's
// configuration from lookup sets up (as the binaries, which inherit the
// environment, read it), and the -db server's databases, or with -sqlite a
// directory of files under tmp. Close drops the databases.
func New(ctx context.Context, o Options, lookup func(string) (string, bool), tmp string) (*Sitting, error) {
	cfg, err := relayConfig(lookup, o.RelaySet)
	if err != nil {
		return nil, err
	}
	s := &Sitting{Opt: o, Res: report.NewResults(), Relay: cfg, Tmp: tmp, Bin: filepath.Join(tmp, "bin")}
	if o.SQLite {
		if s.LiteBounds, err = liteBounds(lookup); err != nil {
			return nil, err
		}
		dir := filepath.Join(tmp, "sqlite")
		if err := os.Mkdir(dir, 0o750); err != nil {
			return nil, err
		}
		s.Files = newFiles(dir, s.LiteBounds)
		return s, nil
	}
	if s.Env, err = NewEnv(ctx, o.DB); err != nil {
		return nil, err
	}
	return s, nil
}

// On is s on another server (the defaults cluster's, at adminURL): the same
// options, relay and binaries, its own results and databases. Close drops
// its databases.
func (s *Sitting) On(ctx context.Context, adminURL string) (*Sitting, error) {
	env, err := NewEnv(ctx, adminURL)
	if err != nil {
		return nil, err
	}
	o := *s
	o.Res, o.Env = report.NewResults(), env
	return &o, nil
}

// Close drops every database the sitting created on its server.
func (s *Sitting) Close() {
	if s.Env != nil {
		s.Env.Close()
	}
}

// Machine describes where the sitting's figures are taken.
func (s *Sitting) Machine(ctx context.Context) report.Machine {
	if s.Opt.SQLite {
		return s.Files.Machine(ctx)
	}
	return s.Env.Machine(ctx)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/acme/outboxpair/bench/internal/binary"
	"github.com/acme/outboxpair/bench/internal/claim"
	"github.com/acme/outboxpair/bench/internal/cluster"
	"github.com/acme/outboxpair/bench/internal/drain"
	"github.com/acme/outboxpair/bench/internal/latency"
	"github.com/acme/outboxpair/bench/internal/natsrun"
	"github.com/acme/outboxpair/bench/internal/pgbench"
	"github.com/acme/outboxpair/bench/internal/producer"
	"github.com/acme/outboxpair/bench/internal/report"
	"github.com/acme/outboxpair/bench/internal/river"
	"github.com/acme/outboxpair/bench/internal/sitting"
)

// bench is one sitting's run: its options, databases and results (the
// Sitting), and what its rounds keep between them.
type bench struct {
	*sitting.Sitting
	nats     *natsrun.Server // nil: no NATS rows
	natsOK   bool
	natsSync *natsrun.Server // -nats-sync-always: the second server, with sync_interval: always
	pair     pgbench.Pair    // the relay's statements, captured at the pair reference's first run
}

var workloadNames = []string{"noop", "scale", "consumer", "http", "latency", "producer", "claim"}

// sqliteWorkloads are the workloads of the SQLite sitting (-sqlite): the
// others measure PostgreSQL itself (pgbench, VACUUM) or its scaling.
var sqliteWorkloads = []string{"noop", "consumer", "http", "latency"}

// sqliteOnly refuses an -only list that names a workload the SQLite sitting
// does not have.
func sqliteOnly(only string) error {
	for _, w := range strings.Split(only, ",") {
		if w != "" && !contains(sqliteWorkloads, w) {
			return fmt.Errorf("-only: %q is not a workload of the SQLite sitting (have %s)", w, strings.Join(sqliteWorkloads, ","))
		}
	}
	return nil
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }

// want tells whether the run measures workload w (-only, -sqlite).
func (b *bench) want(w string) bool {
	if b.Opt.Only == "" {
		return !b.Opt.SQLite || contains(sqliteWorkloads, w)
	}
	for _, x := range strings.Split(b.Opt.Only, ",") {
		if x == w {
			return true
		}
	}
	return false
}

// run is the whole run: the sittings' rounds, interleaved, then the report on
// out.
func run(ctx context.Context, o sitting.Options, out io.Writer) (err error) {
	began := time.Now()
	tmp, err := os.MkdirTemp("", "outboxpair-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	s, err := sitting.New(ctx, o, os.LookupEnv, tmp)
	if err != nil {
		return err
	}
	defer s.Close()
	b := &bench{Sitting: s}
	defer binary.StopAll()

	if !o.SQLite && (b.want("producer") || b.want("consumer")) {
		if b.PgbenchPath, err = exec.LookPath("pgbench"); err != nil {
			return errors.New("pgbench not found in PATH (Debian: apt-get install postgresql-client)")
		}
	}
	if b.want("http") || b.want("latency") {
		root, err := filepath.Abs(o.Root)
		if err != nil {
			return err
		}
		report.Logf("building cmd/labeling and cmd/billing from %s", root)
		if err := binary.Build(ctx, root, b.Bin); err != nil {
			return err
		}
	}
	if o.NATS != "" && (b.want("http") || b.want("latency")) {
		if b.nats, err = natsrun.Open(ctx, o.NATS, tmp, o.NATSServer, false); err != nil {
			return err
		}
		defer b.nats.Close()
		reason, err := b.nats.Probe(ctx, b.Sitting)
		if err != nil {
			return err
		}
		if reason != "" {
			b.Res.Note("NATS rows skipped: %s", reason)
			report.Logf("NATS rows skipped: %s", reason)
			b.nats.Close()
		} else {
			b.natsOK = true
		}
		if b.natsOK && o.NATSSyncAlways {
			if b.natsSync, err = natsrun.Open(ctx, o.NATS, tmp, o.NATSServer, true); err != nil {
				return err
			}
			defer b.natsSync.Close()
		}
	} else if o.NATS == "" && !o.SQLite {
		b.Res.Note("NATS rows not run (no -nats flag)")
	}

	if o.SQLite {
		b.Res.Note("SQLite: every file is opened as the services open theirs (WAL, synchronous=FULL, busy timeout, BEGIN IMMEDIATE on one writer connection); River gets that writer's DSN on the one connection riversqlite's documentation asks for")
		b.Res.Note("SQLite: drains are timed from this host's clock read last before the backlog's commit to the last effect's stamp (processed_at / finalized_at for no-op work, a trigger's unixepoch('subsec') at billing's receipt INSERT for a consumer), in ms; latency stamps are triggers at the INSERT of the producer's row and of the receipt, inside their transactions (SQLite has no deferred trigger)")
		b.Res.Note("SQLite: the wake-ups are the relay's Nudge in the appending process (in process: after the backlog's commit; over HTTP: one activation POSTed right after it, one of the drain's events) and River's notification table, which its listener polls every 50ms")
		b.Res.Note("SQLite: River at its defaults is a reference like River tuned (FetchCooldown 1ms): its 100ms cooldown caps nothing here, River on SQLite staying well below 1,000 jobs/s")
	} else {
		b.Res.Note("drains are timed by the database: from the clock_timestamp() read last in the transaction that commits the backlog (the system started and warmed up before it) to the last effect's stamp (processed_at / finalized_at for no-op work, billing_receipts.bench_at for a consumer)")
		b.Res.Note("River defaults rows are information only (ratio \"info\"): its 100ms FetchCooldown caps it near 1,000 jobs/s; every River ratio is to River tuned (FetchCooldown 1ms)")
	}
	// The defaults cluster's sitting: the same rounds on a cluster of the
	// program's own, interleaved with the usual one round by round, so that both
	// see the same machine; its figures and notes join the one table, suffixed.
	var dc *bench
	if o.PGDefaults {
		c, err := cluster.Start(ctx)
		if err != nil {
			return err
		}
		defer c.Stop()
		ds, err := b.On(ctx, c.URL)
		if err != nil {
			return err
		}
		defer ds.Close()
		dc = &bench{Sitting: ds, nats: b.nats, natsOK: b.natsOK, natsSync: b.natsSync}
		b.Res.Note("defaults cluster: rows suffixed %q ran on a throwaway PostgreSQL cluster of this program's own with initdb's defaults (autovacuum on), each round right after the same round on -db", report.DefaultsSuffix)
	}
	b.Res.Note("latency percentiles are over every event offered: an event never applied (send skipped or failed, or not applied within -latency-grace) counts as beyond any latency, and a percentile that falls among them prints inf")
	for round := 1; round <= o.Rounds; round++ {
		report.Logf("round %d of %d", round, o.Rounds)
		if err := b.round(ctx); err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		if dc != nil {
			report.Logf("round %d of %d on the defaults cluster", round, o.Rounds)
			if err := dc.round(ctx); err != nil {
				return fmt.Errorf("round %d on the defaults cluster: %w", round, err)
			}
		}
	}
	if b.want("claim") {
		if err := claim.Cost(ctx, b.Sitting); err != nil {
			return fmt.Errorf("claim cost: %w", err)
		}
		if dc != nil {
			if err := claim.Cost(ctx, dc.Sitting); err != nil {
				return fmt.Errorf("claim cost on the defaults cluster: %w", err)
			}
		}
	}
	m := b.Machine(ctx)
	cfg := b.Relay
	m.Relay = fmt.Sprintf("ClaimSize=%d Workers=%d Notify=%t PollInterval=%s HandlerTimeout=%s Lease=%s (labeling's configuration from this environment; -relay-set %q on the in-process relays only)",
		cfg.ClaimSize, cfg.Workers, cfg.Notify, cfg.PollInterval, cfg.HandlerTimeout, cfg.Lease, o.RelaySet)
	rows := b.rows()
	if dc != nil {
		dm := dc.Env.Machine(ctx)
		var set []string
		for _, kv := range dm.Settings {
			set = append(set, kv[0]+"="+kv[1])
		}
		b.Res.Note("defaults cluster: PostgreSQL %s, %s", dm.DBVersion, strings.Join(set, ", "))
		rows = append(rows, b.Res.Join(dc.Res, dc.rows())...)
	}
	report.Write(out, m, o.Rounds, summary(o), b.Res, rows, time.Since(began))
	return nil
}

// round runs every wanted figure once, the systems alternating within it.
func (b *bench) round(ctx context.Context) error {
	type step struct {
		key string
		fn  func() (float64, error)
	}
	var steps []step
	drains := func(prefix string, n int, analyzed bool) {
		steps = append(steps, step{prefix + "/project", func() (float64, error) { return drain.Project(ctx, b.Sitting, n, analyzed, nil) }})
		for _, v := range b.rivers() {
			steps = append(steps, step{prefix + "/" + v.Name, func() (float64, error) { return river.Drain(ctx, b.Sitting, v, n, analyzed, false) }})
		}
	}
	if b.want("noop") {
		drains("noop/raw", b.Opt.Backlog, false)
		if !b.Opt.SQLite {
			drains("noop/analyzed", b.Opt.Backlog, true)
		}
	}
	if b.want("scale") {
		drains("scale/small", b.Opt.Small, b.Opt.ScaleAnalyzed)
		drains("scale/big", b.Opt.Big, b.Opt.ScaleAnalyzed)
	}
	if b.want("consumer") {
		steps = append(steps, step{"consumer/project", func() (float64, error) { return drain.ProjectConsumer(ctx, b.Sitting, b.Opt.ConsumerBacklog) }})
		for _, v := range b.rivers() {
			steps = append(steps, step{"consumer/" + v.Name, func() (float64, error) { return river.Drain(ctx, b.Sitting, v, b.Opt.ConsumerBacklog, false, true) }})
		}
		for _, c := range b.pgbenchClients() {
			steps = append(steps, step{"consumer/pgbench-" + strconv.Itoa(c), func() (float64, error) {
				dbURL, err := b.Env.Create(ctx, sitting.SchemaBilling)
				if err != nil {
					return 0, err
				}
				defer b.Env.Drop(context.WithoutCancel(ctx), dbURL)
				return pgbench.Run(ctx, b.Sitting, dbURL, pgbench.ConsumerScript, c, b.Opt.PgbenchDuration)
			}})
		}
		for _, c := range b.pgbenchClients() {
			steps = append(steps, step{"consumer/pgbench-pair-" + strconv.Itoa(c), func() (float64, error) {
				return b.pair.Run(ctx, b.Sitting, c, b.Opt.PgbenchDuration)
			}})
		}
	}
	if b.want("http") {
		steps = append(steps, step{"consumer/http", func() (float64, error) { return binary.Drain(ctx, b.Sitting, b.Opt.HTTPBacklog, binary.HTTP) }})
		// The same drain with labeling writing CloudEvents (binary mode).
		steps = append(steps, step{"consumer/http-cloudevents", func() (float64, error) {
			return binary.Drain(ctx, b.Sitting, b.Opt.HTTPBacklog, binary.HTTP.CloudEvents())
		}})
		if b.natsOK {
			steps = append(steps, step{"consumer/nats", func() (float64, error) { return binary.Drain(ctx, b.Sitting, b.Opt.HTTPBacklog, b.nats.Transport()) }})
			steps = append(steps, step{"consumer/nats-cloudevents", func() (float64, error) {
				return binary.Drain(ctx, b.Sitting, b.Opt.HTTPBacklog, b.nats.Transport().CloudEvents())
			}})
		}
		if b.natsSync != nil {
			steps = append(steps, step{"consumer/nats-sync-always", func() (float64, error) {
				return binary.Drain(ctx, b.Sitting, b.Opt.HTTPBacklog, b.natsSync.Transport())
			}})
		}
	}
	for _, s := range steps {
		if err := ctx.Err(); err != nil {
			return err
		}
		v, err := s.fn()
		if err != nil {
			return fmt.Errorf("%s: %w", s.key, err)
		}
		b.Res.Add(s.key, v)
		report.Logf("%s: %.0f/s", s.key, v)
	}
	if b.want("scale") {
		for _, sys := range b.systems() {
			big, _ := b.Res.Last("scale/big/" + sys)
			small, _ := b.Res.Last("scale/small/" + sys)
			b.Res.Add("scale/ratio/"+sys, big/small)
		}
	}
	if b.want("latency") {
		if err := b.latencyRound(ctx); err != nil {
			return err
		}
	}
	if b.want("producer") {
		if err := producer.Cost(ctx, b.Sitting); err != nil {
			return err
		}
	}
	return nil
}

// rivers are the River variants this run measures (-river).
func (b *bench) rivers() []river.Variant { return river.Selected(b.Opt.River) }

// systems are the names of the drained systems: the project, then each River.
func (b *bench) systems() []string {
	s := []string{"project"}
	for _, v := range b.rivers() {
		s = append(s, v.Name)
	}
	return s
}

// latencyRound runs every system at every offered rate once.
func (b *bench) latencyRound(ctx context.Context) error {
	for _, rate := range b.Opt.Rates {
		type sys struct {
			name string
			fn   func() (latency.Outcome, error)
		}
		list := []sys{
			{"project", func() (latency.Outcome, error) { return latency.Project(ctx, b.Sitting, rate) }},
		}
		for _, v := range b.rivers() {
			list = append(list, sys{v.Name, func() (latency.Outcome, error) { return river.Latency(ctx, b.Sitting, v, rate) }})
		}
		list = append(list, sys{"project-http", func() (latency.Outcome, error) { return binary.Latency(ctx, b.Sitting, rate, binary.HTTP) }})
		if b.natsOK {
			list = append(list, sys{"project-nats", func() (latency.Outcome, error) { return binary.Latency(ctx, b.Sitting, rate, b.nats.Transport()) }})
		}
		for _, s := range list {
			if err := ctx.Err(); err != nil {
				return err
			}
			l, err := s.fn()
			if err != nil {
				return fmt.Errorf("latency %s at %d/s: %w", s.name, rate, err)
			}
			latency.Record(b.Sitting, s.name, rate, l)
		}
	}
	return nil
}

// pgbenchClients are the client counts of both pgbench references.
var pgbenchClients = []int{1, 4, 16}

// pgbenchClients are the pgbench references this run has: none on SQLite.
func (b *bench) pgbenchClients() []int {
	if b.Opt.SQLite {
		return nil
	}
	return pgbenchClients
}

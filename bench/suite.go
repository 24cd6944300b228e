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

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
)

// bench is one run: its options, databases, binaries and results.
type bench struct {
	opt         options
	env         *env
	res         *results
	relayCfg    outbox.Config
	tmp         string // temporary directory: binaries, logs, scripts
	bin         string // where the binaries are built
	pgbenchPath string
	nats        *natsRows // nil: no NATS rows
	natsOK      bool
	natsSync    *natsRows // -nats-sync-always: the second server, with sync_interval: always
	pairSQL     *pairSQL  // the relay's statements, captured at the pair reference's first run
	files       *files    // -sqlite: the run's SQLite files
	liteBounds  sqldb.Bounds
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

func (b *bench) want(w string) bool {
	if b.opt.only == "" {
		return !b.opt.sqlite || contains(sqliteWorkloads, w)
	}
	for _, x := range strings.Split(b.opt.only, ",") {
		if x == w {
			return true
		}
	}
	return false
}

func run(ctx context.Context, o options, out io.Writer) (err error) {
	began := time.Now()
	cfg, err := relayConfig(os.LookupEnv, o.relaySet)
	if err != nil {
		return err
	}
	tmp, err := os.MkdirTemp("", "outboxpair-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	b := &bench{opt: o, res: newResults(), relayCfg: cfg, tmp: tmp, bin: filepath.Join(tmp, "bin")}
	if o.sqlite {
		if b.liteBounds, err = liteBounds(os.LookupEnv); err != nil {
			return err
		}
		dir := filepath.Join(tmp, "sqlite")
		if err := os.Mkdir(dir, 0o750); err != nil {
			return err
		}
		b.files = newFiles(dir, b.liteBounds)
	} else {
		if b.env, err = newEnv(ctx, o.db); err != nil {
			return err
		}
		defer b.env.close()
	}
	defer stopAll()

	if !o.sqlite && (b.want("producer") || b.want("consumer")) {
		if b.pgbenchPath, err = exec.LookPath("pgbench"); err != nil {
			return errors.New("pgbench not found in PATH (Debian: apt-get install postgresql-client)")
		}
	}
	if b.want("http") || b.want("latency") {
		root, err := filepath.Abs(o.root)
		if err != nil {
			return err
		}
		logf("building cmd/labeling and cmd/billing from %s", root)
		if err := buildBinaries(ctx, root, b.bin); err != nil {
			return err
		}
	}
	if o.nats != "" && (b.want("http") || b.want("latency")) {
		if b.nats, err = openNATS(ctx, o.nats, tmp, o.natsServer, false); err != nil {
			return err
		}
		defer b.nats.close()
		reason, err := b.probeNATS(ctx)
		if err != nil {
			return err
		}
		if reason != "" {
			b.res.note("NATS rows skipped: %s", reason)
			logf("NATS rows skipped: %s", reason)
			b.nats.close()
		} else {
			b.natsOK = true
		}
		if b.natsOK && o.natsSyncAlways {
			if b.natsSync, err = openNATS(ctx, o.nats, tmp, o.natsServer, true); err != nil {
				return err
			}
			defer b.natsSync.close()
		}
	} else if o.nats == "" && !o.sqlite {
		b.res.note("NATS rows not run (no -nats flag)")
	}

	if o.sqlite {
		b.res.note("SQLite: every file is opened as the services open theirs (WAL, synchronous=FULL, busy timeout, BEGIN IMMEDIATE on one writer connection); River gets that writer's DSN on the one connection riversqlite's documentation asks for")
		b.res.note("SQLite: drains are timed from this host's clock read last before the backlog's commit to the last effect's stamp (processed_at / finalized_at for no-op work, a trigger's unixepoch('subsec') at billing's receipt INSERT for a consumer), in ms; latency stamps are triggers at the INSERT of the producer's row and of the receipt, inside their transactions (SQLite has no deferred trigger)")
		b.res.note("SQLite: the wake-ups are the relay's Nudge in the appending process (in process: after the backlog's commit; over HTTP: one activation POSTed right after it, one of the drain's events) and River's notification table, which its listener polls every 50ms")
		b.res.note("SQLite: River at its defaults is a reference like River tuned (FetchCooldown 1ms): its 100ms cooldown caps nothing here, River on SQLite staying well below 1,000 jobs/s")
	} else {
		b.res.note("drains are timed by the database: from the clock_timestamp() read last in the transaction that commits the backlog (the system started and warmed up before it) to the last effect's stamp (processed_at / finalized_at for no-op work, billing_receipts.bench_at for a consumer)")
		b.res.note("River defaults rows are information only (ratio \"info\"): its 100ms FetchCooldown caps it near 1,000 jobs/s; every River ratio is to River tuned (FetchCooldown 1ms)")
	}
	// The defaults cluster's sitting: the same rounds on a cluster of the
	// program's own, interleaved with the usual one round by round, so that both
	// see the same machine; its figures and notes join the one table, suffixed.
	var dc *bench
	if o.pgDefaults {
		c, err := startDefaultsCluster(ctx)
		if err != nil {
			return err
		}
		defer c.stop()
		dc = &bench{}
		*dc = *b
		dc.res, dc.pairSQL = newResults(), nil
		if dc.env, err = newEnv(ctx, c.url); err != nil {
			return err
		}
		defer dc.env.close()
		b.res.note("defaults cluster: rows suffixed %q ran on a throwaway PostgreSQL cluster of this program's own with initdb's defaults (autovacuum on), each round right after the same round on -db", defaultsSuffix)
	}
	b.res.note("latency percentiles are over every event offered: an event never applied (send skipped or failed, or not applied within -latency-grace) counts as beyond any latency, and a percentile that falls among them prints inf")
	for round := 1; round <= o.rounds; round++ {
		logf("round %d of %d", round, o.rounds)
		if err := b.round(ctx); err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
		if dc != nil {
			logf("round %d of %d on the defaults cluster", round, o.rounds)
			if err := dc.round(ctx); err != nil {
				return fmt.Errorf("round %d on the defaults cluster: %w", round, err)
			}
		}
	}
	if b.want("claim") {
		if err := b.claimCost(ctx); err != nil {
			return fmt.Errorf("claim cost: %w", err)
		}
		if dc != nil {
			if err := dc.claimCost(ctx); err != nil {
				return fmt.Errorf("claim cost on the defaults cluster: %w", err)
			}
		}
	}
	var m machine
	if o.sqlite {
		m = liteMachine(ctx, b.files.dir, b.liteBounds)
	} else {
		m = b.env.machine(ctx)
	}
	m.Relay = fmt.Sprintf("ClaimSize=%d Workers=%d Notify=%t PollInterval=%s HandlerTimeout=%s Lease=%s (labeling's configuration from this environment; -relay-set %q on the in-process relays only)",
		cfg.ClaimSize, cfg.Workers, cfg.Notify, cfg.PollInterval, cfg.HandlerTimeout, cfg.Lease, o.relaySet)
	rows := b.rows()
	if dc != nil {
		dm := dc.env.machine(ctx)
		var set []string
		for _, kv := range dm.Settings {
			set = append(set, kv[0]+"="+kv[1])
		}
		b.res.note("defaults cluster: PostgreSQL %s, %s", dm.DBVersion, strings.Join(set, ", "))
		rows = append(rows, b.res.join(dc.res, dc.rows())...)
	}
	writeReport(out, m, o, b.res, rows, time.Since(began))
	return nil
}

// defaultsSuffix ends the figure of every row measured on the defaults cluster.
const defaultsSuffix = " (defaults cluster)"

// join adds other's figures and notes to r under the key prefix "defaults/",
// and returns rows, which read other, as rows that read them there, suffixed
// defaultsSuffix.
func (r *results) join(other *results, rows []row) []row {
	const prefix = "defaults/"
	other.mu.Lock()
	for k, v := range other.vals {
		for _, x := range v {
			r.add(prefix+k, x)
		}
	}
	notes := slices.Clone(other.notes)
	other.mu.Unlock()
	for _, n := range notes {
		r.note("defaults cluster: %s", n)
	}
	out := make([]row, 0, len(rows))
	for _, x := range rows {
		x.Figure += defaultsSuffix
		x.Project = prefix + x.Project
		if x.Ref != "" {
			x.Ref = prefix + x.Ref
		}
		out = append(out, x)
	}
	return out
}

// round runs every wanted figure once, the systems alternating within it.
func (b *bench) round(ctx context.Context) error {
	type step struct {
		key string
		fn  func() (float64, error)
	}
	var steps []step
	drains := func(prefix string, n int, analyzed bool) {
		steps = append(steps, step{prefix + "/project", func() (float64, error) { return b.projectDrain(ctx, n, analyzed, nil) }})
		for _, v := range b.rivers() {
			steps = append(steps, step{prefix + "/" + v.name, func() (float64, error) { return b.riverDrain(ctx, v, n, analyzed, false) }})
		}
	}
	if b.want("noop") {
		drains("noop/raw", b.opt.backlog, false)
		if !b.opt.sqlite {
			drains("noop/analyzed", b.opt.backlog, true)
		}
	}
	if b.want("scale") {
		drains("scale/small", b.opt.small, b.opt.scaleAnalyzed)
		drains("scale/big", b.opt.big, b.opt.scaleAnalyzed)
	}
	if b.want("consumer") {
		steps = append(steps, step{"consumer/project", func() (float64, error) { return b.projectConsumerDrain(ctx, b.opt.consumerBacklog) }})
		for _, v := range b.rivers() {
			steps = append(steps, step{"consumer/" + v.name, func() (float64, error) { return b.riverDrain(ctx, v, b.opt.consumerBacklog, false, true) }})
		}
		for _, c := range b.pgbenchClients() {
			steps = append(steps, step{"consumer/pgbench-" + strconv.Itoa(c), func() (float64, error) {
				dbURL, err := b.env.create(ctx, schemaBilling)
				if err != nil {
					return 0, err
				}
				defer b.env.drop(context.WithoutCancel(ctx), dbURL)
				return b.pgbench(ctx, dbURL, consumerScript, c, b.opt.pgbenchDuration)
			}})
		}
		for _, c := range b.pgbenchClients() {
			steps = append(steps, step{"consumer/pgbench-pair-" + strconv.Itoa(c), func() (float64, error) {
				return b.pairPgbench(ctx, c, b.opt.pgbenchDuration)
			}})
		}
	}
	if b.want("http") {
		steps = append(steps, step{"consumer/http", func() (float64, error) { return b.httpDrain(ctx, b.opt.httpBacklog, httpTransport) }})
		// The same drain with labeling writing CloudEvents (binary mode).
		steps = append(steps, step{"consumer/http-cloudevents", func() (float64, error) {
			return b.httpDrain(ctx, b.opt.httpBacklog, httpTransport.cloudEvents())
		}})
		if b.natsOK {
			steps = append(steps, step{"consumer/nats", func() (float64, error) { return b.httpDrain(ctx, b.opt.httpBacklog, b.nats.transport()) }})
			steps = append(steps, step{"consumer/nats-cloudevents", func() (float64, error) {
				return b.httpDrain(ctx, b.opt.httpBacklog, b.nats.transport().cloudEvents())
			}})
		}
		if b.natsSync != nil {
			steps = append(steps, step{"consumer/nats-sync-always", func() (float64, error) {
				return b.httpDrain(ctx, b.opt.httpBacklog, b.natsSync.transport())
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
		b.res.add(s.key, v)
		logf("%s: %.0f/s", s.key, v)
	}
	if b.want("scale") {
		for _, sys := range b.systems() {
			big, _ := b.res.last("scale/big/" + sys)
			small, _ := b.res.last("scale/small/" + sys)
			b.res.add("scale/ratio/"+sys, big/small)
		}
	}
	if b.want("latency") {
		if err := b.latencyRound(ctx); err != nil {
			return err
		}
	}
	if b.want("producer") {
		if err := b.producerCost(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (b *bench) systems() []string {
	s := []string{"project"}
	for _, v := range b.rivers() {
		s = append(s, v.name)
	}
	return s
}

func (b *bench) latencyRound(ctx context.Context) error {
	for _, rate := range b.opt.rates {
		type sys struct {
			name string
			fn   func() (latency, error)
		}
		list := []sys{
			{"project", func() (latency, error) { return b.projectLatency(ctx, rate) }},
		}
		for _, v := range b.rivers() {
			list = append(list, sys{v.name, func() (latency, error) { return b.riverLatency(ctx, v, rate) }})
		}
		list = append(list, sys{"project-http", func() (latency, error) { return b.httpLatency(ctx, rate, httpTransport) }})
		if b.natsOK {
			list = append(list, sys{"project-nats", func() (latency, error) { return b.httpLatency(ctx, rate, b.nats.transport()) }})
		}
		for _, s := range list {
			if err := ctx.Err(); err != nil {
				return err
			}
			l, err := s.fn()
			if err != nil {
				return fmt.Errorf("latency %s at %d/s: %w", s.name, rate, err)
			}
			b.addLatency(s.name, rate, l)
		}
	}
	return nil
}

// pgbenchClients are the client counts of both pgbench references.
var pgbenchClients = []int{1, 4, 16}

// pgbenchClients are the pgbench references this run has: none on SQLite.
func (b *bench) pgbenchClients() []int {
	if b.opt.sqlite {
		return nil
	}
	return pgbenchClients
}

// riverTuned is the River every ratio is to; riverDefaults (FetchCooldown
// 100ms caps it near 1,000 jobs/s) is printed beside it for information only.
const (
	riverTuned    = "river-1ms"
	riverDefaults = "river"
)

// rows is the table: each figure of the project beside its references. River
// at its defaults is an Info row: shown, never a ratio.
func (b *bench) rows() []row {
	var rs []row
	add := func(fig, unit, p string, refs ...row) {
		for _, r := range refs {
			r.Figure, r.Unit, r.Project = fig, unit, p
			rs = append(rs, r)
		}
	}
	ref := func(name, key string) row { return row{RefName: name, Ref: key} }
	// On SQLite River's 100ms cooldown is no cap (River stays well below
	// 1,000 jobs/s there) and its tuned variant need not be the faster one, so
	// both are references.
	defaults := row{RefName: "River defaults (information)", Info: true}
	if b.opt.sqlite {
		defaults = row{RefName: "River defaults"}
	}
	riverRefs := func(key func(sys string) string) []row {
		d := defaults
		d.Ref = key(riverDefaults)
		return []row{ref("River tuned (FetchCooldown 1ms)", key(riverTuned)), d}
	}
	rivers := func(prefix string) []row {
		return riverRefs(func(sys string) string { return prefix + "/" + sys })
	}
	add(fmt.Sprintf("no-op drain %d, not analyzed", b.opt.backlog), "rows/s", "noop/raw/project", rivers("noop/raw")...)
	add(fmt.Sprintf("no-op drain %d, analyzed", b.opt.backlog), "rows/s", "noop/analyzed/project", rivers("noop/analyzed")...)
	an := "not analyzed"
	if b.opt.scaleAnalyzed {
		an = "analyzed"
	}
	add(fmt.Sprintf("no-op drain %d, %s", b.opt.small, an), "rows/s", "scale/small/project", rivers("scale/small")...)
	add(fmt.Sprintf("no-op drain %d, %s", b.opt.big, an), "rows/s", "scale/big/project", rivers("scale/big")...)
	add(fmt.Sprintf("drain rate %d / rate %d", b.opt.big, b.opt.small), "ratio", "scale/ratio/project", rivers("scale/ratio")...)
	consumerRefs := rivers("consumer")
	for _, c := range b.pgbenchClients() {
		consumerRefs = append(consumerRefs, ref(fmt.Sprintf("pgbench billing txn, %d client(s)", c), fmt.Sprintf("consumer/pgbench-%d", c)))
	}
	for _, c := range b.pgbenchClients() {
		consumerRefs = append(consumerRefs, ref(fmt.Sprintf("pgbench pair's SQL per event, %d client(s)", c), fmt.Sprintf("consumer/pgbench-pair-%d", c)))
	}
	add(fmt.Sprintf("consumer drain %d, in process (Apply)", b.opt.consumerBacklog), "events/s", "consumer/project", consumerRefs...)
	add(fmt.Sprintf("consumer drain %d, HTTP, real binaries", b.opt.httpBacklog), "events/s", "consumer/http",
		append([]row{ref("project in process", "consumer/project")}, consumerRefs...)...)
	add(fmt.Sprintf("consumer drain %d, NATS, real binaries", b.opt.httpBacklog), "events/s", "consumer/nats",
		append([]row{ref("project HTTP", "consumer/http")}, consumerRefs...)...)
	add(fmt.Sprintf("consumer drain %d, HTTP, CloudEvents, real binaries", b.opt.httpBacklog), "events/s", "consumer/http-cloudevents",
		ref("project HTTP, envelope", "consumer/http"))
	add(fmt.Sprintf("consumer drain %d, NATS, CloudEvents, real binaries", b.opt.httpBacklog), "events/s", "consumer/nats-cloudevents",
		ref("project NATS, envelope", "consumer/nats"))
	add(fmt.Sprintf("consumer drain %d, NATS sync_interval: always, real binaries", b.opt.httpBacklog), "events/s", "consumer/nats-sync-always",
		ref("NATS default sync", "consumer/nats"))
	for _, rate := range b.opt.rates {
		for _, m := range []struct{ key, unit string }{
			{"p50", "ms"}, {"p99", "ms"}, {"max", "ms"},
			{"unapplied", "events offered, never applied"}, {"skipped", "sends skipped"},
			{"backlog", "rows at end"}, {"achieved", "events/s"},
		} {
			k := func(sys string) string { return fmt.Sprintf("lat/%s/%d/%s", sys, rate, m.key) }
			latRivers := riverRefs(k)
			add(fmt.Sprintf("latency @%d/s %s, in process", rate, m.key), m.unit, k("project"), latRivers...)
			add(fmt.Sprintf("latency @%d/s %s, HTTP binaries", rate, m.key), m.unit, k("project-http"),
				append([]row{ref("project in process", k("project"))}, latRivers...)...)
			add(fmt.Sprintf("latency @%d/s %s, NATS binaries", rate, m.key), m.unit, k("project-nats"),
				ref("project HTTP", k("project-http")))
		}
	}
	for _, p := range []string{"1", "16"} {
		add("producer txn, "+p+" producer(s)", "appends/s", "producer/"+p+"/project", ref("pgbench "+p+" client(s)", "producer/"+p+"/pgbench"))
	}
	for _, m := range []struct{ key, name, unit string }{
		{"claimstmt", "claim statement, median", "ms"}, {"claimfirst", "claim statement, first", "ms"},
		{"settlestmt", "settle statement, median", "ms"},
		{"batch", "RunOnce batch, median", "ms"}, {"first", "RunOnce batch, first", "ms"}, {"row", "RunOnce per row", "µs"},
	} {
		add(fmt.Sprintf("claim+settle, %d settled rows not vacuumed, %s", b.opt.settled, m.name), m.unit,
			"claim/notvacuumed/"+m.key, ref("vacuumed", "claim/vacuumed/"+m.key))
	}
	return rs
}

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
}

var workloadNames = []string{"noop", "scale", "consumer", "http", "latency", "producer", "claim"}

func contains(list []string, s string) bool { return slices.Contains(list, s) }

func (b *bench) want(w string) bool {
	if b.opt.only == "" {
		return true
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
	cfg, err := relayConfig(o.relaySet)
	if err != nil {
		return err
	}
	e, err := newEnv(ctx, o.db)
	if err != nil {
		return err
	}
	defer e.close()
	defer stopAll()
	tmp, err := os.MkdirTemp("", "outboxpair-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	b := &bench{opt: o, env: e, res: newResults(), relayCfg: cfg, tmp: tmp, bin: filepath.Join(tmp, "bin")}

	if b.want("producer") || b.want("consumer") {
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
		if b.nats, err = openNATS(ctx, o.nats, tmp); err != nil {
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
	} else if o.nats == "" {
		b.res.note("NATS rows not run (no -nats flag)")
	}

	for round := 1; round <= o.rounds; round++ {
		logf("round %d of %d", round, o.rounds)
		if err := b.round(ctx); err != nil {
			return fmt.Errorf("round %d: %w", round, err)
		}
	}
	if b.want("claim") {
		if err := b.claimCost(ctx); err != nil {
			return fmt.Errorf("claim cost: %w", err)
		}
	}
	writeReport(out, e.machine(ctx), o, b.res, b.rows(), time.Since(began))
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
		steps = append(steps, step{prefix + "/project", func() (float64, error) { return b.projectDrain(ctx, n, analyzed, noopSubs) }})
		for _, v := range riverVariants {
			steps = append(steps, step{prefix + "/" + v.name, func() (float64, error) { return b.riverDrain(ctx, v, n, analyzed, false) }})
		}
	}
	if b.want("noop") {
		drains("noop/raw", b.opt.backlog, false)
		drains("noop/analyzed", b.opt.backlog, true)
	}
	if b.want("scale") {
		drains("scale/small", b.opt.small, b.opt.scaleAnalyzed)
		drains("scale/big", b.opt.big, b.opt.scaleAnalyzed)
	}
	if b.want("consumer") {
		steps = append(steps, step{"consumer/project", func() (float64, error) { return b.projectConsumerDrain(ctx, b.opt.consumerBacklog) }})
		for _, v := range riverVariants {
			steps = append(steps, step{"consumer/" + v.name, func() (float64, error) { return b.riverDrain(ctx, v, b.opt.consumerBacklog, false, true) }})
		}
		for _, c := range []int{1, 16} {
			steps = append(steps, step{"consumer/pgbench-" + strconv.Itoa(c), func() (float64, error) {
				dbURL, err := b.env.create(ctx, schemaBilling)
				if err != nil {
					return 0, err
				}
				defer b.env.drop(context.WithoutCancel(ctx), dbURL)
				return b.pgbench(ctx, dbURL, consumerScript, c, b.opt.pgbenchDuration)
			}})
		}
	}
	if b.want("http") {
		steps = append(steps, step{"consumer/http", func() (float64, error) { return b.httpDrain(ctx, b.opt.httpBacklog, httpTransport) }})
		if b.natsOK {
			steps = append(steps, step{"consumer/nats", func() (float64, error) { return b.httpDrain(ctx, b.opt.httpBacklog, b.nats.transport()) }})
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
	for _, v := range riverVariants {
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
		for _, v := range riverVariants {
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

// rows is the table: each figure of the project beside its references.
func (b *bench) rows() []row {
	var rs []row
	vs := func(fig, unit, p string, refs ...[2]string) {
		for _, r := range refs {
			rs = append(rs, row{Figure: fig, Unit: unit, Project: p, RefName: r[0], Ref: r[1]})
		}
	}
	rivers := func(prefix string) [][2]string {
		var refs [][2]string
		for _, v := range riverVariants {
			refs = append(refs, [2]string{v.name, prefix + "/" + v.name})
		}
		return refs
	}
	vs(fmt.Sprintf("no-op drain %d, not analyzed", b.opt.backlog), "rows/s", "noop/raw/project", rivers("noop/raw")...)
	vs(fmt.Sprintf("no-op drain %d, analyzed", b.opt.backlog), "rows/s", "noop/analyzed/project", rivers("noop/analyzed")...)
	an := "not analyzed"
	if b.opt.scaleAnalyzed {
		an = "analyzed"
	}
	vs(fmt.Sprintf("no-op drain %d, %s", b.opt.small, an), "rows/s", "scale/small/project", rivers("scale/small")...)
	vs(fmt.Sprintf("no-op drain %d, %s", b.opt.big, an), "rows/s", "scale/big/project", rivers("scale/big")...)
	vs(fmt.Sprintf("drain rate %d / rate %d", b.opt.big, b.opt.small), "ratio", "scale/ratio/project", rivers("scale/ratio")...)
	consumerRefs := append(rivers("consumer"), [2]string{"pgbench 1 client", "consumer/pgbench-1"}, [2]string{"pgbench 16 clients", "consumer/pgbench-16"})
	vs(fmt.Sprintf("consumer drain %d, in process (Apply)", b.opt.consumerBacklog), "events/s", "consumer/project", consumerRefs...)
	vs(fmt.Sprintf("consumer drain %d, HTTP, real binaries", b.opt.httpBacklog), "events/s", "consumer/http",
		append([][2]string{{"project in process", "consumer/project"}}, consumerRefs...)...)
	vs(fmt.Sprintf("consumer drain %d, NATS, real binaries", b.opt.httpBacklog), "events/s", "consumer/nats",
		[2]string{"project HTTP", "consumer/http"}, [2]string{"river", "consumer/river"})
	for _, rate := range b.opt.rates {
		for _, m := range []struct{ key, unit string }{{"p50", "ms"}, {"p99", "ms"}, {"max", "ms"}, {"backlog", "rows at end"}, {"achieved", "events/s"}} {
			k := func(sys string) string { return fmt.Sprintf("lat/%s/%d/%s", sys, rate, m.key) }
			var refs [][2]string
			for _, v := range riverVariants {
				refs = append(refs, [2]string{v.name, k(v.name)})
			}
			vs(fmt.Sprintf("latency @%d/s %s, in process", rate, m.key), m.unit, k("project"), refs...)
			vs(fmt.Sprintf("latency @%d/s %s, HTTP binaries", rate, m.key), m.unit, k("project-http"),
				[2]string{"project in process", k("project")}, [2]string{"river", k("river")})
			vs(fmt.Sprintf("latency @%d/s %s, NATS binaries", rate, m.key), m.unit, k("project-nats"),
				[2]string{"project HTTP", k("project-http")})
		}
	}
	for _, p := range []string{"1", "16"} {
		vs("producer txn, "+p+" producer(s)", "appends/s", "producer/"+p+"/project", [2]string{"pgbench " + p + " client(s)", "producer/" + p + "/pgbench"})
	}
	for _, m := range []struct{ key, name, unit string }{
		{"claimstmt", "claim statement, median", "ms"}, {"claimfirst", "claim statement, first", "ms"},
		{"settlestmt", "settle statement, median", "ms"},
		{"batch", "RunOnce batch, median", "ms"}, {"first", "RunOnce batch, first", "ms"}, {"row", "RunOnce per row", "µs"},
	} {
		vs(fmt.Sprintf("claim+settle, %d settled rows not vacuumed, %s", b.opt.settled, m.name), m.unit,
			"claim/notvacuumed/"+m.key, [2]string{"vacuumed", "claim/vacuumed/" + m.key})
	}
	return rs
}

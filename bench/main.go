// Command bench measures the project's outbox beside River (the queue a Go team
// would pick instead) and beside pgbench running the same transactions, in one
// run of interleaved rounds, and prints the medians in one table. It creates its
// own databases on the -db server and drops them at the end (also on Ctrl-C).
// BENCHMARKS.md at the repository root explains every figure.
//
//	cd bench && go run . -rounds 3
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// options are the flags.
type options struct {
	db               string
	root             string
	rounds           int
	only             string
	backlog          int
	small, big       int
	scaleAnalyzed    bool
	consumerBacklog  int
	httpBacklog      int
	rates            []int
	latencyDuration  time.Duration
	latencyGrace     time.Duration
	producerDuration time.Duration
	pgbenchDuration  time.Duration
	settled          int
	claimBatches     int
	drainLimit       time.Duration
	nats             string
	natsServer       string
	natsSyncAlways   bool
	relaySet         string
	sqlite           bool
	river            []string // River variants beside the project (riverVariants' names)
	pgDefaults       bool
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&o.db, "db", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "a database of the (loopback) PostgreSQL server to create the benchmark's databases on")
	fs.StringVar(&o.root, "root", "..", "the project root (where cmd/labeling and cmd/billing are)")
	fs.IntVar(&o.rounds, "rounds", 3, "rounds of every figure (medians are reported)")
	fs.StringVar(&o.only, "only", "", "comma-separated workloads to run (default all): "+strings.Join(workloadNames, ","))
	fs.IntVar(&o.backlog, "backlog", 50000, "rows of the no-op drain")
	fs.IntVar(&o.small, "small", 10000, "the small backlog of the scaling figure")
	fs.IntVar(&o.big, "big", 100000, "the big backlog of the scaling figure")
	fs.BoolVar(&o.scaleAnalyzed, "scale-analyzed", false, "ANALYZE before the scaling drains")
	fs.IntVar(&o.consumerBacklog, "consumer-backlog", 20000, "events of the in-process consumer drain")
	fs.IntVar(&o.httpBacklog, "http-backlog", 10000, "events of the consumer drain through the binaries")
	rates := fs.String("rates", "200,1000,3000", "offered rates (events/s) of the latency figure")
	fs.DurationVar(&o.latencyDuration, "latency-duration", 20*time.Second, "how long each rate is offered")
	fs.DurationVar(&o.latencyGrace, "latency-grace", 30*time.Second, "how long to wait after the load for the backlog to drain")
	fs.DurationVar(&o.producerDuration, "producer-duration", 10*time.Second, "length of each producer run (Go and pgbench)")
	fs.DurationVar(&o.pgbenchDuration, "pgbench-duration", 10*time.Second, "length of each pgbench consumer run")
	fs.IntVar(&o.settled, "settled", 1000000, "settled rows in the table for the claim cost")
	fs.IntVar(&o.claimBatches, "claim-batches", 200, "batches timed by the claim cost (each way)")
	fs.DurationVar(&o.drainLimit, "drain-limit", 5*time.Minute, "a drain that takes longer fails")
	fs.StringVar(&o.nats, "nats", "", "also run the NATS rows: a loopback JetStream URL, or \"start\" to run a private nats-server")
	fs.StringVar(&o.natsServer, "nats-server", "", "the nats-server binary -nats start runs (default: nats-server in PATH, else /usr/sbin/nats-server)")
	fs.BoolVar(&o.natsSyncAlways, "nats-sync-always", false, "with -nats start: also the NATS drain on a second private server with sync_interval: always (needs nats-server 2.10 or later)")
	fs.StringVar(&o.relaySet, "relay-set", "", "outbox.Config fields set on the in-process relays, e.g. \"ClaimSize=50\"")
	fs.BoolVar(&o.sqlite, "sqlite", false, "the SQLite sitting: the pair on SQLite files beside River on SQLite (riversqlite); workloads "+strings.Join(sqliteWorkloads, ",")+", no PostgreSQL needed")
	river := fs.String("river", "river-1ms,river", "River variants run beside the project (river-1ms: tuned, the reference of every River ratio; river: its defaults, information only), or \"none\": at ~1,000 jobs/s River's defaults take 17 minutes for a 1M backlog")
	fs.BoolVar(&o.pgDefaults, "pg-defaults", false, "also run every round on a throwaway PostgreSQL cluster of the program's own with initdb's default settings (autovacuum on), its rows suffixed \"(defaults cluster)\"; needs the server binaries (initdb, postgres: Debian's postgresql-15)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *river != "none" {
		for _, name := range strings.Split(*river, ",") {
			name = strings.TrimSpace(name)
			if !slices.ContainsFunc(riverVariants, func(v riverVariant) bool { return v.name == name }) {
				return o, fmt.Errorf("-river: unknown variant %q (have river-1ms, river, or none)", name)
			}
			o.river = append(o.river, name)
		}
	}
	for _, s := range strings.Split(*rates, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || r <= 0 {
			return o, fmt.Errorf("-rates: %q is not a positive number", s)
		}
		o.rates = append(o.rates, r)
	}
	for _, w := range strings.Split(o.only, ",") {
		if w != "" && !contains(workloadNames, w) {
			return o, fmt.Errorf("-only: unknown workload %q (have %s)", w, strings.Join(workloadNames, ","))
		}
	}
	if o.natsSyncAlways && o.nats != "start" {
		return o, fmt.Errorf("-nats-sync-always: needs -nats start (it starts the second server beside the first)")
	}
	if o.sqlite {
		if err := sqliteOnly(o.only); err != nil {
			return o, err
		}
		if o.nats != "" {
			return o, fmt.Errorf("-nats: the SQLite sitting has no NATS rows")
		}
		if o.pgDefaults {
			return o, fmt.Errorf("-pg-defaults: the SQLite sitting has no PostgreSQL")
		}
	}
	if o.rounds < 1 {
		return o, fmt.Errorf("-rounds must be at least 1")
	}
	return o, nil
}

func (o options) summary() string {
	if o.sqlite {
		return fmt.Sprintf("-sqlite -backlog %d -consumer-backlog %d -http-backlog %d -rates %v -latency-duration %s -latency-grace %s -drain-limit %s -relay-set %q",
			o.backlog, o.consumerBacklog, o.httpBacklog, o.rates, o.latencyDuration, o.latencyGrace, o.drainLimit, o.relaySet)
	}
	return fmt.Sprintf("-backlog %d -small %d -big %d -scale-analyzed=%t -consumer-backlog %d -http-backlog %d -rates %v -latency-duration %s -producer-duration %s -pgbench-duration %s -settled %d -claim-batches %d -nats %q -nats-server %q -nats-sync-always=%t -relay-set %q -river %q -pg-defaults=%t",
		o.backlog, o.small, o.big, o.scaleAnalyzed, o.consumerBacklog, o.httpBacklog, o.rates, o.latencyDuration,
		o.producerDuration, o.pgbenchDuration, o.settled, o.claimBatches, o.nats, o.natsServer, o.natsSyncAlways, o.relaySet, o.riverList(), o.pgDefaults)
}

// riverList is -river as given: the variants' names, or "none".
func (o options) riverList() string {
	if len(o.river) == 0 {
		return "none"
	}
	return strings.Join(o.river, ",")
}

func main() {
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		}
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

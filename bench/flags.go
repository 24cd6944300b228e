package main

import (
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/acme/outboxpair/bench/internal/river"
	"github.com/acme/outboxpair/bench/internal/sitting"
)

// parseFlags reads the command line into the options, refusing a combination
// the run cannot honour.
func parseFlags(args []string) (sitting.Options, error) {
	var o sitting.Options
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.StringVar(&o.DB, "db", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable", "a database of the (loopback) PostgreSQL server to create the benchmark's databases on")
	fs.StringVar(&o.Root, "root", "..", "the project root (where cmd/labeling and cmd/billing are)")
	fs.IntVar(&o.Rounds, "rounds", 3, "rounds of every figure (medians are reported)")
	fs.StringVar(&o.Only, "only", "", "comma-separated workloads to run (default all): "+strings.Join(workloadNames, ","))
	fs.IntVar(&o.Backlog, "backlog", 50000, "rows of the no-op drain")
	fs.IntVar(&o.Small, "small", 10000, "the small backlog of the scaling figure")
	fs.IntVar(&o.Big, "big", 100000, "the big backlog of the scaling figure")
	fs.BoolVar(&o.ScaleAnalyzed, "scale-analyzed", false, "ANALYZE before the scaling drains")
	fs.IntVar(&o.ConsumerBacklog, "consumer-backlog", 20000, "events of the in-process consumer drain")
	fs.IntVar(&o.HTTPBacklog, "http-backlog", 10000, "events of the consumer drain through the binaries")
	rates := fs.String("rates", "200,1000,3000", "offered rates (events/s) of the latency figure")
	fs.DurationVar(&o.LatencyDuration, "latency-duration", 20*time.Second, "how long each rate is offered")
	fs.DurationVar(&o.LatencyGrace, "latency-grace", 30*time.Second, "how long to wait after the load for the backlog to drain")
	fs.DurationVar(&o.ProducerDuration, "producer-duration", 10*time.Second, "length of each producer run (Go and pgbench)")
	fs.DurationVar(&o.PgbenchDuration, "pgbench-duration", 10*time.Second, "length of each pgbench consumer run")
	fs.IntVar(&o.Settled, "settled", 1000000, "settled rows in the table for the claim cost")
	fs.IntVar(&o.ClaimBatches, "claim-batches", 200, "batches timed by the claim cost (each way)")
	fs.DurationVar(&o.DrainLimit, "drain-limit", 5*time.Minute, "a drain that takes longer fails")
	fs.StringVar(&o.NATS, "nats", "", "also run the NATS rows: a loopback JetStream URL, or \"start\" to run a private nats-server")
	fs.StringVar(&o.NATSServer, "nats-server", "", "the nats-server binary -nats start runs (default: nats-server in PATH, else /usr/sbin/nats-server)")
	fs.BoolVar(&o.NATSSyncAlways, "nats-sync-always", false, "with -nats start: also the NATS drain on a second private server with sync_interval: always (needs nats-server 2.10 or later)")
	fs.StringVar(&o.RelaySet, "relay-set", "", "outbox.Config fields set on the in-process relays, e.g. \"ClaimSize=50\"")
	fs.BoolVar(&o.SQLite, "sqlite", false, "the SQLite sitting: the pair on SQLite files beside River on SQLite (riversqlite); workloads "+strings.Join(sqliteWorkloads, ",")+", no PostgreSQL needed")
	riverFlag := fs.String("river", "river-1ms,river", "River variants run beside the project (river-1ms: tuned, the reference of every River ratio; river: its defaults, information only), or \"none\": at ~1,000 jobs/s River's defaults take 17 minutes for a 1M backlog")
	fs.BoolVar(&o.PGDefaults, "pg-defaults", false, "also run every round on a throwaway PostgreSQL cluster of the program's own with initdb's default settings (autovacuum on), its rows suffixed \"(defaults cluster)\"; needs the server binaries (initdb, postgres: Debian's postgresql-15)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if *riverFlag != "none" {
		for _, name := range strings.Split(*riverFlag, ",") {
			name = strings.TrimSpace(name)
			if !slices.ContainsFunc(river.Variants, func(v river.Variant) bool { return v.Name == name }) {
				return o, fmt.Errorf("-river: unknown variant %q (have river-1ms, river, or none)", name)
			}
			o.River = append(o.River, name)
		}
	}
	for _, s := range strings.Split(*rates, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || r <= 0 {
			return o, fmt.Errorf("-rates: %q is not a positive number", s)
		}
		o.Rates = append(o.Rates, r)
	}
	for _, w := range strings.Split(o.Only, ",") {
		if w != "" && !contains(workloadNames, w) {
			return o, fmt.Errorf("-only: unknown workload %q (have %s)", w, strings.Join(workloadNames, ","))
		}
	}
	if o.NATSSyncAlways && o.NATS != "start" {
		return o, fmt.Errorf("-nats-sync-always: needs -nats start (it starts the second server beside the first)")
	}
	if o.SQLite {
		if err := sqliteOnly(o.Only); err != nil {
			return o, err
		}
		if o.NATS != "" {
			return o, fmt.Errorf("-nats: the SQLite sitting has no NATS rows")
		}
		if o.PGDefaults {
			return o, fmt.Errorf("-pg-defaults: the SQLite sitting has no PostgreSQL")
		}
	}
	if o.Rounds < 1 {
		return o, fmt.Errorf("-rounds must be at least 1")
	}
	return o, nil
}

// summary is the options as the report prints them.
func summary(o sitting.Options) string {
	if o.SQLite {
		return fmt.Sprintf("-sqlite -backlog %d -consumer-backlog %d -http-backlog %d -rates %v -latency-duration %s -latency-grace %s -drain-limit %s -relay-set %q",
			o.Backlog, o.ConsumerBacklog, o.HTTPBacklog, o.Rates, o.LatencyDuration, o.LatencyGrace, o.DrainLimit, o.RelaySet)
	}
	return fmt.Sprintf("-backlog %d -small %d -big %d -scale-analyzed=%t -consumer-backlog %d -http-backlog %d -rates %v -latency-duration %s -producer-duration %s -pgbench-duration %s -settled %d -claim-batches %d -nats %q -nats-server %q -nats-sync-always=%t -relay-set %q -river %q -pg-defaults=%t",
		o.Backlog, o.Small, o.Big, o.ScaleAnalyzed, o.ConsumerBacklog, o.HTTPBacklog, o.Rates, o.LatencyDuration,
		o.ProducerDuration, o.PgbenchDuration, o.Settled, o.ClaimBatches, o.NATS, o.NATSServer, o.NATSSyncAlways, o.RelaySet, riverList(o), o.PGDefaults)
}

// riverList is -river as given: the variants' names, or "none".
func riverList(o sitting.Options) string {
	if len(o.River) == 0 {
		return "none"
	}
	return strings.Join(o.River, ",")
}

package main

import (
	"fmt"

	"github.com/acme/outboxpair/bench/internal/report"
	"github.com/acme/outboxpair/bench/internal/river"
)

// rows is the table: each figure of the project beside its references. River
// at its defaults is an Info row: shown, never a ratio.
func (b *bench) rows() []report.Row {
	var rs []report.Row
	add := func(fig, unit, p string, refs ...report.Row) {
		for _, r := range refs {
			r.Figure, r.Unit, r.Project = fig, unit, p
			rs = append(rs, r)
		}
	}
	ref := func(name, key string) report.Row { return report.Row{RefName: name, Ref: key} }
	// On SQLite River's 100ms cooldown is no cap (River stays well below
	// 1,000 jobs/s there) and its tuned variant need not be the faster one, so
	// both are references.
	defaults := report.Row{RefName: "River defaults (information)", Info: true}
	if b.Opt.SQLite {
		defaults = report.Row{RefName: "River defaults"}
	}
	riverRefs := func(key func(sys string) string) []report.Row {
		d := defaults
		d.Ref = key(river.Defaults)
		return []report.Row{ref("River tuned (FetchCooldown 1ms)", key(river.Tuned)), d}
	}
	rivers := func(prefix string) []report.Row {
		return riverRefs(func(sys string) string { return prefix + "/" + sys })
	}
	add(fmt.Sprintf("no-op drain %d, not analyzed", b.Opt.Backlog), "rows/s", "noop/raw/project", rivers("noop/raw")...)
	add(fmt.Sprintf("no-op drain %d, analyzed", b.Opt.Backlog), "rows/s", "noop/analyzed/project", rivers("noop/analyzed")...)
	an := "not analyzed"
	if b.Opt.ScaleAnalyzed {
		an = "analyzed"
	}
	add(fmt.Sprintf("no-op drain %d, %s", b.Opt.Small, an), "rows/s", "scale/small/project", rivers("scale/small")...)
	add(fmt.Sprintf("no-op drain %d, %s", b.Opt.Big, an), "rows/s", "scale/big/project", rivers("scale/big")...)
	add(fmt.Sprintf("drain rate %d / rate %d", b.Opt.Big, b.Opt.Small), "ratio", "scale/ratio/project", rivers("scale/ratio")...)
	consumerRefs := rivers("consumer")
	for _, c := range b.pgbenchClients() {
		consumerRefs = append(consumerRefs, ref(fmt.Sprintf("pgbench billing txn, %d client(s)", c), fmt.Sprintf("consumer/pgbench-%d", c)))
	}
	for _, c := range b.pgbenchClients() {
		consumerRefs = append(consumerRefs, ref(fmt.Sprintf("pgbench pair's SQL per event, %d client(s)", c), fmt.Sprintf("consumer/pgbench-pair-%d", c)))
	}
	add(fmt.Sprintf("consumer drain %d, in process (Apply)", b.Opt.ConsumerBacklog), "events/s", "consumer/project", consumerRefs...)
	add(fmt.Sprintf("consumer drain %d, HTTP, real binaries", b.Opt.HTTPBacklog), "events/s", "consumer/http",
		append([]report.Row{ref("project in process", "consumer/project")}, consumerRefs...)...)
	add(fmt.Sprintf("consumer drain %d, NATS, real binaries", b.Opt.HTTPBacklog), "events/s", "consumer/nats",
		append([]report.Row{ref("project HTTP", "consumer/http")}, consumerRefs...)...)
	add(fmt.Sprintf("consumer drain %d, HTTP, CloudEvents, real binaries", b.Opt.HTTPBacklog), "events/s", "consumer/http-cloudevents",
		ref("project HTTP, envelope", "consumer/http"))
	add(fmt.Sprintf("consumer drain %d, NATS, CloudEvents, real binaries", b.Opt.HTTPBacklog), "events/s", "consumer/nats-cloudevents",
		ref("project NATS, envelope", "consumer/nats"))
	add(fmt.Sprintf("consumer drain %d, NATS sync_interval: always, real binaries", b.Opt.HTTPBacklog), "events/s", "consumer/nats-sync-always",
		ref("NATS default sync", "consumer/nats"))
	for _, rate := range b.Opt.Rates {
		for _, m := range []struct{ key, unit string }{
			{"p50", "ms"}, {"p99", "ms"}, {"max", "ms"},
			{"unapplied", "events offered, never applied"}, {"skipped", "sends skipped"},
			{"backlog", "rows at end"}, {"achieved", "events/s"},
		} {
			k := func(sys string) string { return fmt.Sprintf("lat/%s/%d/%s", sys, rate, m.key) }
			latRivers := riverRefs(k)
			add(fmt.Sprintf("latency @%d/s %s, in process", rate, m.key), m.unit, k("project"), latRivers...)
			add(fmt.Sprintf("latency @%d/s %s, HTTP binaries", rate, m.key), m.unit, k("project-http"),
				append([]report.Row{ref("project in process", k("project"))}, latRivers...)...)
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
		add(fmt.Sprintf("claim+settle, %d settled rows not vacuumed, %s", b.Opt.Settled, m.name), m.unit,
			"claim/notvacuumed/"+m.key, ref("vacuumed", "claim/vacuumed/"+m.key))
	}
	return rs
}

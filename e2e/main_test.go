package e2e

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// Paths of the binaries TestMain builds once for every scenario.
var (
	labelingBin string
	billingBin  string
	ledgerBin   string // the example consumer, the fan-out scenarios' second consumer
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	start := time.Now()
	defer proctest.RemoveBuilds()
	if err := buildBinaries(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	built := time.Since(start)
	code := m.Run()
	summary := tally.summary(built, time.Since(start))
	fmt.Print(summary)
	// go test shows a passing package's output only with -v; CI names a file so
	// that it can print the summary whatever the outcome.
	if path := os.Getenv("E2E_SUMMARY"); path != "" {
		if err := os.WriteFile(path, []byte(summary), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "e2e: write E2E_SUMMARY:", err)
		}
	}
	return code
}

// buildBinaries builds cmd/labeling, cmd/billing and example/ledger/cmd/ledger with failpoints.
func buildBinaries() (err error) {
	if labelingBin, err = proctest.Binary("./cmd/labeling", "failpoints"); err != nil {
		return err
	}
	if billingBin, err = proctest.Binary("./cmd/billing", "failpoints"); err != nil {
		return err
	}
	if ledgerBin, err = proctest.Binary("./example/ledger/cmd/ledger", "failpoints"); err != nil {
		return err
	}
	natsServerBin, err = findNATSServer()
	return err
}

// tally sums what every scenario did, for the summary printed at the end.
var tally = &counts{}

type counts struct {
	mu         sync.Mutex
	scenarios  int
	failed     []string
	kills      int // SIGKILLs sent by the harness plus failpoint exits
	terms      int // SIGTERMs sent
	cuts       int // database backends terminated
	requests   int // HTTP requests sent to the services' APIs
	events     int // outbox rows at the end of each scenario
	duplicates int // deliveries billing answered as already applied (absorbed by receipts)
	// publishes JetStream acked as duplicates (absorbed by the broker's window)
	brokerDuplicates int
	natsScenarios    int // scenarios run over the NATS transport
	cloudEvents      int // scenarios whose labeling wrote CloudEvents (EVENTS_FORMAT=cloudevents)
	dbCrashes        int // SIGKILLs of a scenario's whole PostgreSQL cluster
	dbProcsKilled    int // PostgreSQL processes those crashes killed (postmaster and children)
	partitions       int // partitions between the services and their databases
	partition503s    int // probe requests answered 503 during a partition
	slowest503       time.Duration
	partitionStop    time.Duration // the longest SIGTERM-to-exit during a partition
	// the longest from a heal until both services work again, unrestarted
	partitionRecovery time.Duration
	convergence       time.Duration
	slowest           string
	// The second hop (billing's outbox → the stand-in provider), in the
	// scenarios that run it.
	hop2Scenarios      int
	hop2Kills          int // billing killed while it calls a provider (failpoint exits included)
	providerOutages    int // SIGKILLs of the stand-in provider
	providerCalls      int // calls billing's relay made (claims of its rows that got past the after-claim point)
	providerApplied    int // changes the stand-in applied, one per QuotaChanged row
	providerDuplicates int // calls the stand-in absorbed: their Idempotency-Key was applied before
}

func (c *counts) add(f func(c *counts)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

func (c *counts) summary(build, total time.Duration) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := "\n=== e2e crash suite summary\n"
	s += fmt.Sprintf("scenarios run:                %d (%d over NATS JetStream, %d failed)\n", c.scenarios, c.natsScenarios, len(c.failed))
	for _, name := range c.failed {
		s += fmt.Sprintf("  failed: %s\n", name)
	}
	s += fmt.Sprintf("in CloudEvents:               %d of them (EVENTS_FORMAT=cloudevents; the rest in the envelope)\n", c.cloudEvents)
	s += fmt.Sprintf("kills (SIGKILL, incl. failpoint exits): %d\n", c.kills)
	s += fmt.Sprintf("SIGTERMs:                     %d\n", c.terms)
	s += fmt.Sprintf("database backends terminated: %d\n", c.cuts)
	s += fmt.Sprintf("database crashes:             %d (SIGKILL of every PostgreSQL process: %d killed; restarted on the same data)\n", c.dbCrashes, c.dbProcsKilled)
	s += fmt.Sprintf("database partitions:          %d (blackholed TCP: %d probes answered 503, slowest %s; longest recovery after a heal %s; longest SIGTERM stop in one %s)\n",
		c.partitions, c.partition503s, c.slowest503.Round(time.Millisecond), c.partitionRecovery.Round(time.Millisecond), c.partitionStop.Round(time.Millisecond))
	s += fmt.Sprintf("requests sent:                %d\n", c.requests)
	s += fmt.Sprintf("events (outbox rows):         %d\n", c.events)
	s += fmt.Sprintf("duplicates absorbed by receipts: %d (billing_events_total{outcome=\"already_applied\"})\n", c.duplicates)
	s += fmt.Sprintf("duplicates absorbed by the broker: %d (nats_publishes_total{outcome=\"duplicate\"})\n", c.brokerDuplicates)
	s += fmt.Sprintf("second hop (billing → provider): %d scenarios; %d kills of billing, %d of the provider; %d provider calls made, %d changes applied, %d duplicates absorbed by the provider (Idempotency-Key)\n",
		c.hop2Scenarios, c.hop2Kills, c.providerOutages, c.providerCalls, c.providerApplied, c.providerDuplicates)
	s += ledgerTally.line()
	s += fmt.Sprintf("longest convergence:          %s (%s)\n", c.convergence.Round(time.Millisecond), c.slowest)
	s += fmt.Sprintf("build %s, suite %s\n", build.Round(time.Millisecond), total.Round(time.Millisecond))
	return s
}

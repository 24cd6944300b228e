package e2e

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/wire"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
	"github.com/acme/outboxpair/internal/testsupport/proxytest"
	"github.com/acme/outboxpair/migrations"
)

// Bounds of every wait in the harness.
const (
	readyTimeout = 30 * time.Second // a started process answers /readyz 200
	deathTimeout = 15 * time.Second // an armed failpoint is reached and the process is dead
	stopBound    = 25 * time.Second // SIGTERM to exit: the services' own stop bound is 20s
	eventsToken  = "e2e-events-token"
)

// config tunes one scenario's cluster. Zero fields take the defaults of setup.
type config struct {
	replicas           int           // labeling processes on the one labeling database
	claimSize          int           // OUTBOX_CLAIM_SIZE
	handlerTimeout     time.Duration // OUTBOX_HANDLER_TIMEOUT
	lease              time.Duration // OUTBOX_LEASE; handlerTimeout ≤ lease
	maxAttempts        int           // OUTBOX_MAX_ATTEMPTS
	labelingFailpoints string        // FAILPOINTS of the first start of every labeling process
	billingFailpoints  string        // FAILPOINTS of billing's first start
	billingDown        bool          // reserve billing's port but do not start it
	transport          string        // EVENTS_TRANSPORT: transportHTTP (the default) or transportNATS
	// format is labeling's EVENTS_FORMAT: "" picks one by the scenario's name,
	// so that half of the scenarios of today's build run in CloudEvents and
	// half in the envelope (always the envelope beside another build, which
	// may not read CloudEvents).
	format    string
	natsNodes int               // JetStream servers with transportNATS: 1, or 3 for a cluster (R3 stream)
	env       map[string]string // more variables for every process (e.g. OTEL_*)
	pg        *pgServer         // the scenario's own PostgreSQL cluster; nil: the shared test server (pgtest)
	proxied   bool              // each service reaches its database through a blackholeProxy
	dialect   sqldb.Dialect     // the databases' dialect: PostgreSQL (the default) or SQLite files
	// provider, when set, is the second hop: billing calls this stand-in from its
	// own outbox (PROVIDER_URL, PROVIDER_SECRET) with the relay settings of
	// labeling's, and the invariant covers billing_outbox_events and the stand-in.
	provider *standIn
	// ledger, when set, runs the example consumer beside billing, subscribed to
	// RuleActivated only (ledger_test.go); nil: billing is the only consumer.
	ledger *ledgerConfig
	// billingDurableOnly leaves the audit durable out (NATS_CONSUMERS=billing):
	// the interest stream then removes each message once billing acked it.
	billingDurableOnly bool
	// labelingBinary and billingBinary run another build (previousRelease's,
	// TestMixedVersions) instead of today's; "": today's.
	labelingBinary, billingBinary string
	// unmigrated creates both databases empty: each service migrates its own at
	// its first start, as in a deploy (the shared server or SQLite files).
	unmigrated bool
}

func (c config) withDefaults() config {
	if c.replicas == 0 {
		c.replicas = 1
	}
	if c.claimSize == 0 {
		c.claimSize = 2
	}
	if c.handlerTimeout == 0 {
		c.handlerTimeout = 2 * time.Second
	}
	if c.lease == 0 {
		c.lease = 4 * time.Second
	}
	if c.transport == "" {
		c.transport = transportHTTP
	}
	if c.dialect == "" {
		c.dialect = sqldb.Postgres
	}
	if c.transport == transportNATS && c.natsNodes == 0 {
		c.natsNodes = 1
	}
	if c.maxAttempts == 0 {
		// Room for about ten seconds of retries at the 500ms cap: longer than any
		// outage a scenario causes, so a failed row means a lost event.
		c.maxAttempts = 25
	}
	return c
}

// cluster is one scenario's world: two fresh databases, billing, and one or more
// labeling processes delivering to it.
type cluster struct {
	t      *testing.T
	cfg    config
	labDB  *pgtest.DB // PostgreSQL only: nil on SQLite
	billDB *pgtest.DB
	// labQ and billQ read the two databases in either dialect (the invariant).
	labQ, billQ *dbtest.DB
	billing     *proc
	labeling    []*proc
	nats        []*natsNode // the JetStream servers, with transportNATS
	http        *http.Client
	// With cfg.proxied, the proxies between each service and its database.
	labProxy, billProxy *proxytest.Proxy
	provider            *standIn // cfg.provider: the second hop's stand-in, or nil
	// cfg.ledger: the second consumer, or nil.
	ledger *ledgerSide

	mu       sync.Mutex
	requests int
	events   int
	hop2     hop2Figures // the second hop's figures at the last convergence
}

// setup starts a cluster for t. Everything it starts is killed when t ends, and
// when t failed the tail of every start's output is printed (internal/testsupport/proctest).
func setup(t *testing.T, cfg config) *cluster {
	t.Helper()
	cfg = cfg.withDefaults()
	require.LessOrEqual(t, cfg.handlerTimeout, cfg.lease,
		"the contract's rule: handler timeout ≤ lease")
	c := &cluster{
		t:   t,
		cfg: cfg,
		http: &http.Client{
			Timeout:   5 * time.Second,
			Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 5 * time.Second},
		},
	}
	var labURL, billURL string
	switch {
	case cfg.dialect == sqldb.SQLite && cfg.unmigrated:
		c.labQ = dbtest.OpenSQLite(t, "sqlite:"+filepath.Join(t.TempDir(), "labeling.db"))
		c.billQ = dbtest.OpenSQLite(t, "sqlite:"+filepath.Join(t.TempDir(), "billing.db"))
		labURL, billURL = c.labQ.URL, c.billQ.URL
	case cfg.dialect == sqldb.SQLite:
		// A file per service, migrated as serve migrates it; every labeling
		// replica shares the one file.
		c.labQ, c.billQ = dbtest.New(t, sqldb.SQLite, migrations.Labeling), dbtest.New(t, sqldb.SQLite, migrations.Billing)
		labURL, billURL = c.labQ.URL, c.billQ.URL
	case cfg.unmigrated && cfg.pg == nil:
		c.labDB, c.billDB = pgtest.Empty(t), pgtest.Empty(t)
	case cfg.pg != nil:
		// Empty: each service migrates its own at its first start.
		c.labDB, c.billDB = cfg.pg.newDB(t, "labeling"), cfg.pg.newDB(t, "billing")
	default:
		c.labDB, c.billDB = pgtest.New(t, migrations.Labeling), pgtest.New(t, migrations.Billing)
	}
	if c.labDB != nil {
		labURL, billURL = c.labDB.URL, c.billDB.URL
		c.labQ = &dbtest.DB{DB: postgres.NewDB(c.labDB.Pool), URL: c.labDB.URL, Pool: c.labDB.Pool}
		c.billQ = &dbtest.DB{DB: postgres.NewDB(c.billDB.Pool), URL: c.billDB.URL, Pool: c.billDB.Pool}
	}
	if cfg.proxied {
		labURL, c.labProxy = proxytest.Via(t, labURL)
		billURL, c.billProxy = proxytest.Via(t, billURL)
	}
	if cfg.format == "" && cfg.labelingBinary == "" && cfg.billingBinary == "" {
		h := fnv.New32a()
		_, _ = h.Write([]byte(t.Name()))
		cfg.format = string(wire.FormatEnvelope)
		if h.Sum32()%2 == 1 {
			cfg.format = string(wire.FormatCloudEvents)
		}
	}
	c.cfg.format = cfg.format
	tally.add(func(s *counts) {
		s.scenarios++
		if cfg.format == string(wire.FormatCloudEvents) {
			s.cloudEvents++
		}
	})
	// Registered after pgtest's cleanups, so it runs before the databases are
	// dropped; and before any process starts, so it runs after they are all killed.
	t.Cleanup(c.teardown)

	billingEnv := map[string]string{
		"DATABASE_URL": appURL(t, billURL, "e2e-billing"),
		"EVENTS_TOKEN": eventsToken,
	}
	natsEnv := map[string]string{}
	if cfg.transport == transportNATS {
		c.nats = startNATS(t, cfg.natsNodes)
		// An unacked delivery (billing killed holding it) comes back after 2s.
		billingEnv["NATS_URL"] = natsURL(c.nats)
		billingEnv["NATS_ACK_WAIT"] = "2s"
		natsEnv = map[string]string{
			"EVENTS_TRANSPORT": transportNATS,
			"NATS_URL":         natsURL(c.nats),
			"NATS_REPLICAS":    fmt.Sprint(cfg.natsNodes),
			// The stream keeps every event for the audit consumer too, which
			// reads it only at the end.
			"NATS_CONSUMERS": "billing," + auditDurable,
		}
		if cfg.billingDurableOnly {
			natsEnv["NATS_CONSUMERS"] = "billing"
		}
	}
	if cfg.provider != nil {
		c.provider = cfg.provider
		billingEnv["PROVIDER_URL"] = cfg.provider.url()
		billingEnv["PROVIDER_SECRET"] = cfg.provider.secret
		maps.Copy(billingEnv, relayEnv(cfg))
	}
	maps.Copy(billingEnv, cfg.env)
	c.billing = newProc(t, "billing", cmp.Or(cfg.billingBinary, billingBin), billingEnv)
	c.billing.secondHop = cfg.provider != nil
	if !cfg.billingDown {
		c.billing.launch(t, cfg.billingFailpoints)
	}
	subscriberEnv := c.startLedger(t, natsEnv) // labeling's settings for the second consumer, if any
	for i := range cfg.replicas {
		name := "labeling"
		if cfg.replicas > 1 {
			name = fmt.Sprintf("labeling-%d", i+1)
		}
		p := newProc(t, name, cmp.Or(cfg.labelingBinary, labelingBin), map[string]string{
			"DATABASE_URL": appURL(t, labURL, "e2e-labeling"),
			"EVENTS_TOKEN": eventsToken,
			"BILLING_URL":  c.billing.url(),
		})
		maps.Copy(p.env, relayEnv(cfg))
		if cfg.format != "" {
			p.env["EVENTS_FORMAT"] = cfg.format
		}
		maps.Copy(p.env, natsEnv)
		maps.Copy(p.env, subscriberEnv)
		maps.Copy(p.env, cfg.env)
		p.launch(t, cfg.labelingFailpoints)
		c.labeling = append(c.labeling, p)
	}
	return c
}

// relayEnv is the relay settings of every relay the scenario runs: labeling's,
// and billing's when it calls a provider (the same variables, read by each
// service for its own outbox).
func relayEnv(cfg config) map[string]string {
	return map[string]string{
		"OUTBOX_POLL_INTERVAL":       "50ms",
		"OUTBOX_CLAIM_SIZE":          fmt.Sprint(cfg.claimSize),
		"OUTBOX_HANDLER_TIMEOUT":     cfg.handlerTimeout.String(),
		"OUTBOX_LEASE":               cfg.lease.String(),
		"OUTBOX_MAX_ATTEMPTS":        fmt.Sprint(cfg.maxAttempts),
		"OUTBOX_RETRY_BASE":          "50ms",
		"OUTBOX_RETRY_MAX":           "500ms",
		"OUTBOX_PROCESSED_RETENTION": "168h",
		"CLEANUP_INTERVAL":           "1h",
	}
}

// teardown adds the scenario to the tally. It runs after every process is gone:
// proctest kills each start at the end of the test, and billing's counters are
// harvested just before (see start).
func (c *cluster) teardown() {
	t := c.t
	procs := append([]*proc{c.billing}, c.labeling...)
	c.mu.Lock()
	requests, events, hop2 := c.requests, c.events, c.hop2
	c.mu.Unlock()
	var dups, brokerDups int
	for _, p := range procs {
		if p.isBilling() {
			dups += p.duplicates
		} else {
			brokerDups += p.duplicates
		}
	}
	t.Logf("e2e: %s transport: %d duplicates absorbed by receipts, %d by the broker", c.cfg.transport, dups, brokerDups)
	if c.provider != nil {
		t.Logf("e2e: second hop: %d provider calls made, %d changes applied by the provider, %d duplicates it absorbed",
			hop2.calls, hop2.applied, hop2.duplicates)
	}
	tally.add(func(s *counts) {
		if c.provider != nil {
			s.hop2Scenarios++
			s.providerCalls += hop2.calls
			s.providerApplied += hop2.applied
			s.providerDuplicates += hop2.duplicates
		}
		s.requests += requests
		s.events += events
		s.duplicates += dups
		s.brokerDuplicates += brokerDups
		if c.cfg.transport == transportNATS {
			s.natsScenarios++
		}
		if t.Failed() {
			s.failed = append(s.failed, t.Name())
		}
	})
}

// lab returns the only (or first) labeling process.
func (c *cluster) lab() *proc { return c.labeling[0] }

// appURL adds application_name to a database URL, so that the database-cut
// scenario can terminate the services' backends and not the test's own.
func appURL(t *testing.T, raw, app string) string {
	if sqldb.DialectOf(raw) == sqldb.SQLite {
		return raw // a file: no sessions to name
	}
	u, err := url.Parse(raw)
	require.NoError(t, err)
	q := u.Query()
	q.Set("application_name", app)
	u.RawQuery = q.Encode()
	return u.String()
}

// freeAddr returns a loopback address whose port was free a moment ago.
func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// proc is one service process, restartable on the same address with the same
// environment. Each start is a proctest.Process of its own.
type proc struct {
	t      *testing.T
	name   string
	bin    string
	addr   string
	env    map[string]string
	starts int
	// duplicates harvested from ended lives: billing's already-applied
	// deliveries (absorbed by receipts), labeling's duplicate publish acks
	// (absorbed by the broker's duplicate window).
	duplicates int
	// secondHop: billing with its relay calling a provider; its kills are the
	// second hop's too.
	secondHop bool
	// afterClaimExits counts the lives that died at the relay's after-claim
	// point: claims of a row that made no call.
	afterClaimExits int
	// consumer names the metrics (NAME_events_total) of a consumer other than
	// billing (the ledger), whose duplicates are its already_applied outcomes.
	consumer string

	mu        sync.Mutex
	life      *proctest.Process // the latest start; nil before the first
	harvested bool              // this life's metrics were already added to duplicates
}

func newProc(t *testing.T, name, bin string, env map[string]string) *proc {
	return &proc{t: t, name: name, bin: bin, addr: freeAddr(t), env: env}
}

func (p *proc) url() string { return "http://" + p.addr }

// isBilling tells billing's processes from labeling's, whichever build they run
// (the previous release's is named billing in its cache directory). It reads no
// variable buildPrevious writes: other tests call it while that build runs.
func (p *proc) isBilling() bool { return p.bin == billingBin || filepath.Base(p.bin) == "billing" }

// launch is the first start: when the port picked was taken in the meantime, it
// retries on another port. Later starts reuse the address.
func (p *proc) launch(t *testing.T, failpoints string) {
	t.Helper()
	for try := 0; ; try++ {
		err := p.start(failpoints)
		if err == nil {
			return
		}
		if try < 2 && strings.Contains(p.current().Output.String(), "address already in use") {
			p.addr = freeAddr(t)
			continue
		}
		t.Fatalf("%s: %v", p.name, err)
	}
}

// restart starts the process again on its address, without failpoints.
func (p *proc) restart(t *testing.T) {
	t.Helper()
	p.restartWith(t, "")
}

// restartWith starts the process again on its address with
// FAILPOINTS=failpoints (none when empty).
func (p *proc) restartWith(t *testing.T, failpoints string) {
	t.Helper()
	require.False(t, p.alive(), "%s: restart of a running process", p.name)
	if err := p.start(failpoints); err != nil {
		t.Fatalf("%s: restart: %v", p.name, err)
	}
}

// restartArmed starts the process again on its address with failpoints armed
// that it may reach before it is ready (billing's relay claims a waiting row at
// once): it returns when the process answers /readyz 200 or has exited, and the
// caller's requireDiedAt says where it died.
func (p *proc) restartArmed(t *testing.T, failpoints string) {
	t.Helper()
	require.False(t, p.alive(), "%s: restart of a running process", p.name)
	if err := p.startLife(failpoints, true); err != nil {
		t.Fatalf("%s: restart: %v", p.name, err)
	}
}

// start runs the binary with FAILPOINTS=failpoints (none when empty) and waits
// until it answers /readyz 200 or exits.
func (p *proc) start(failpoints string) error { return p.startLife(failpoints, false) }

// startLife is start; with mayExit an exit before ready is no error.
func (p *proc) startLife(failpoints string, mayExit bool) error {
	env := maps.Clone(p.env)
	env["HTTP_ADDR"] = p.addr
	env["AUTH_DISABLED"] = "true" // the crash suite is about delivery, not authentication
	if failpoints != "" {
		env["FAILPOINTS"] = failpoints
	}
	p.starts++
	life := proctest.Start(p.t, p.bin, env, "serve")
	p.t.Logf("e2e: start #%d of %s on %s (pid %d), FAILPOINTS=%q", p.starts, p.name, p.addr, life.Pid(), failpoints)
	p.mu.Lock()
	p.life, p.harvested = life, false
	p.mu.Unlock()
	// Cleanups run last-in first-out: this one reads the life's counters
	// before proctest's, registered just before, kills it.
	p.t.Cleanup(p.harvest)

	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-life.Done():
			if mayExit {
				return nil
			}
			return fmt.Errorf("exited before ready: %s", life.Wait(p.t, 0))
		default:
		}
		if resp, err := client.Get(p.url() + "/readyz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %s", readyTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// current is the latest start.
func (p *proc) current() *proctest.Process {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.life
}

func (p *proc) alive() bool {
	life := p.current()
	if life == nil {
		return false
	}
	select {
	case <-life.Done():
		return false
	default:
		return true
	}
}

func (p *proc) pid() int {
	if life := p.current(); life != nil {
		return life.Pid()
	}
	return 0
}

// kill sends SIGKILL to the process group and waits for the exit: one of the
// scenario's kills.
func (p *proc) kill() {
	if !p.alive() {
		return
	}
	p.harvest()
	p.current().Kill(p.t)
	p.tallyKill()
}

// tallyKill counts one kill of the process, in the second hop's too when it is
// billing calling a provider.
func (p *proc) tallyKill() {
	tally.add(func(s *counts) {
		s.kills++
		if p.secondHop {
			s.hop2Kills++
		}
	})
}

// terminate sends SIGTERM and waits, up to stopBound, for the exit. It returns
// the exit state and how long the process took to stop.
func (p *proc) terminate(t *testing.T) (*os.ProcessState, time.Duration) {
	t.Helper()
	require.True(t, p.alive(), "%s: SIGTERM to a dead process", p.name)
	p.harvest()
	life := p.current()
	start := time.Now()
	life.Signal(t, syscall.SIGTERM)
	tally.add(func(s *counts) { s.terms++ })
	state := life.Wait(t, stopBound)
	return state, time.Since(start)
}

// requireDiedAt waits for the process to die at the failpoint called point: it
// must have been killed by a signal nobody but itself sent, after printing the
// failpoint's line.
func (p *proc) requireDiedAt(t *testing.T, point string) {
	t.Helper()
	life := p.current()
	state := life.Wait(t, deathTimeout) // the request that passes point kills it
	require.Equal(t, "signal: killed", state.String(), "%s died another way", p.name)
	line := fmt.Sprintf("failpoint %s: exit", point)
	require.Contains(t, life.Output.String(), line, "%s did not die at %s", p.name, point)
	p.tallyKill()
	if point == failpoint.RelayAfterClaim {
		p.afterClaimExits++
	}
}

// harvest adds the duplicates this life counted to duplicates, once per life,
// while the process still answers.
func (p *proc) harvest() {
	if !p.alive() {
		return
	}
	p.mu.Lock()
	done := p.harvested
	p.harvested = true
	p.mu.Unlock()
	if done {
		return
	}
	if n, err := p.lifeDuplicates(); err == nil {
		p.duplicates += n
	}
}

// lifeDuplicates reads the running life's duplicates: billing's
// already_applied outcomes, or labeling's duplicate publish acks.
func (p *proc) lifeDuplicates() (int, error) {
	if p.isBilling() {
		outcomes, err := p.billingOutcomes()
		return int(outcomes["already_applied"]), err
	}
	if p.consumer != "" {
		outcomes, err := p.counter(p.consumer+"_events_total", "outcome")
		return int(outcomes["already_applied"]), err
	}
	outcomes, err := p.counter("nats_publishes_total", "outcome")
	return int(outcomes["duplicate"]), err
}

// duplicatesSoFar is every duplicate of the process (see duplicates):
// harvested lives plus the running one.
func (p *proc) duplicatesSoFar(t *testing.T) int {
	t.Helper()
	n := p.duplicates
	if p.alive() {
		d, err := p.lifeDuplicates()
		require.NoError(t, err)
		n += d
	}
	return n
}

// billingOutcomes reads billing_events_total from /metrics, summed by outcome.
func (p *proc) billingOutcomes() (map[string]float64, error) {
	return p.counter("billing_events_total", "outcome")
}

// counter reads the counter called name from /metrics, summed by the value of
// label ("" for every series under the key "").
func (p *proc) counter(name, label string) (map[string]float64, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(p.url() + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics answered %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := map[string]float64{}
	if f := families[name]; f != nil {
		for _, m := range f.GetMetric() {
			key := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					key = l.GetValue()
				}
			}
			out[key] += m.GetCounter().GetValue()
		}
	}
	return out, nil
}

// --- the labeling and billing APIs, as a client sees them ---

// errTransport marks a request that got no HTTP answer: its outcome is unknown.
var errTransport = errors.New("no answer")

// send makes one request to base+path with body as JSON (none when nil) and
// returns the status and body. A transport failure wraps errTransport.
func (c *cluster) send(ctx context.Context, base, method, path string, body any) (int, []byte, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, err
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, r)
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	c.mu.Lock()
	c.requests++
	c.mu.Unlock()
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %s %s: %w", errTransport, method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %s %s: reading body: %w", errTransport, method, path, err)
	}
	return resp.StatusCode, b, nil
}

// retryTimeout bounds how long a client retries one request whose outcome is
// unknown: long enough for a restart, a lease and a database cut.
const retryTimeout = 60 * time.Second

// sendUntil sends the request to target() until it answers one of want,
// retrying transport errors and 5xx (the outcome unknown, or the service
// unavailable) with a pause. Any other answer, or the deadline, is an error.
func (c *cluster) sendUntil(ctx context.Context, target func() *proc, method, path string, body any, want ...int) (int, []byte, error) {
	deadline := time.Now().Add(retryTimeout)
	var last string
	for {
		status, b, err := c.send(ctx, target().url(), method, path, body)
		switch {
		case err == nil && containsInt(want, status):
			return status, b, nil
		case err == nil && status < 500:
			return status, b, fmt.Errorf("%s %s answered %d: %s", method, path, status, b)
		case err != nil && !errors.Is(err, errTransport):
			return 0, nil, err
		case err != nil:
			last = err.Error()
		default:
			last = fmt.Sprintf("%d %s", status, b)
		}
		if time.Now().After(deadline) {
			return 0, nil, fmt.Errorf("%s %s: no answer in %v within %s; last: %s", method, path, want, retryTimeout, last)
		}
		select {
		case <-ctx.Done():
			return 0, nil, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func containsInt(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

// rule is a rule as the labeling API answers it.
type rule struct {
	ID     uuid.UUID `json:"id"`
	OrgID  uuid.UUID `json:"orgId"`
	Name   string    `json:"name"`
	Active bool      `json:"active"`
}

func newRuleBody(id uuid.UUID) map[string]string {
	return map[string]string{"id": id.String(), "name": "rule " + id.String()[:8], "pattern": "inv(oice)?-[0-9]+", "label": "billing"}
}

func rulesPath(org uuid.UUID) string { return "/v1/orgs/" + org.String() + "/rules" }

func rulePath(org, id uuid.UUID, action string) string {
	return rulesPath(org) + "/" + id.String() + "/" + action
}

// quota asks billing's API for the org's active rules.
func (c *cluster) quota(t *testing.T, org uuid.UUID) int64 {
	t.Helper()
	status, b, err := c.send(context.Background(), c.billing.url(), http.MethodGet, "/v1/orgs/"+org.String()+"/quota", nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, status, "%s", b)
	var q struct {
		OrgID       uuid.UUID `json:"orgId"`
		ActiveRules int64     `json:"activeRules"`
	}
	require.NoError(t, json.Unmarshal(b, &q))
	require.Equal(t, org, q.OrgID)
	return q.ActiveRules
}

// decodeRule reads a rule answer.
func decodeRule(t *testing.T, b []byte) rule {
	t.Helper()
	var r rule
	require.NoError(t, json.Unmarshal(b, &r), "%s", b)
	return r
}

// waitFor polls cond in the test's own goroutine (so cond may use require)
// every 20ms until it is true, failing t after timeout.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool, msgAndArgs ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			require.Fail(t, fmt.Sprintf("condition not met within %s", timeout), msgAndArgs...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

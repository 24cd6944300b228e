// Package binary runs the pair as it ships: cmd/labeling and cmd/billing
// built from the project root with go build, each on a free loopback port with
// a fresh database of its own, handing events over HTTP or NATS (a Transport),
// for the consumer drain and the offered rates through the real binaries.
package binary

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/acme/outboxpair/bench/internal/db"
	"github.com/acme/outboxpair/bench/internal/drain"
	"github.com/acme/outboxpair/bench/internal/latency"
	"github.com/acme/outboxpair/bench/internal/report"
	"github.com/acme/outboxpair/bench/internal/sitting"
)

// Build builds cmd/labeling and cmd/billing of the project at root into dir.
func Build(ctx context.Context, root, dir string) error {
	for _, name := range []string{"labeling", "billing"} {
		cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, name), "./cmd/"+name)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build ./cmd/%s in %s: %w\n%s", name, root, err, out)
		}
	}
	return nil
}

// process is one running binary; its output goes to a log file in the run's
// temporary directory (shown when it fails).
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	addr string
	done chan struct{}
}

// procs tracks every process the run started, so that an interrupted run stops
// them too.
var procs struct {
	mu  sync.Mutex
	set map[*process]bool
}

// FreeAddr is a loopback address whose port was free when it returned.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// start runs bin serve with env (plus HTTP_ADDR on a free loopback port) and
// waits until its /readyz answers 200.
func start(ctx context.Context, s *sitting.Sitting, name string, env []string) (*process, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(s.Tmp, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(s.Bin, name), "serve")
	cmd.Env = append(append(os.Environ(), env...), "HTTP_ADDR="+addr, "EVENTS_TOKEN="+sitting.EventsToken, "AUTH_DISABLED=true")
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	p := &process{name: name, cmd: cmd, log: logPath, addr: addr, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logFile.Close(); close(p.done) }()
	procs.mu.Lock()
	if procs.set == nil {
		procs.set = map[*process]bool{}
	}
	procs.set[p] = true
	procs.mu.Unlock()
	if err := p.ready(ctx, 30*time.Second); err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

func (p *process) ready(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited at start: %s", p.name, report.Tail(p.log))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		resp, err := client.Get("http://" + p.addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
	}
	return fmt.Errorf("%s not ready after %s: %s", p.name, limit, report.Tail(p.log))
}

// stop sends SIGTERM, waits up to 25s (the services drain within 20s), then kills.
func (p *process) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(25 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	procs.mu.Lock()
	delete(procs.set, p)
	procs.mu.Unlock()
}

// StopAll stops every process the run started that is still running
// (Ctrl-C, or an error).
func StopAll() {
	procs.mu.Lock()
	var ps []*process
	for p := range procs.set {
		ps = append(ps, p)
	}
	procs.mu.Unlock()
	for _, p := range ps {
		p.stop()
	}
}

// Pair is a billing and a labeling process on fresh databases.
type Pair struct {
	labURL, bilURL string
	billing        *process
	labeling       *process
}

// Transport is how labeling hands events to billing in a run of the binaries.
type Transport struct {
	Name string   // "http" or "nats"
	Lab  []string // extra labeling environment
	Bil  []string // extra billing environment
	// Reset, when set, prepares the transport for a run (for NATS: deletes
	// the stream, so the run starts on an empty one).
	Reset func(ctx context.Context) error
}

// HTTP is labeling POSTing to billing, the binaries' default.
var HTTP = Transport{Name: "http"}

// CloudEvents is t with labeling writing CloudEvents in binary mode
// (EVENTS_FORMAT=cloudevents) instead of the envelope.
func (t Transport) CloudEvents() Transport {
	t.Lab = append(slices.Clone(t.Lab), "EVENTS_FORMAT=cloudevents")
	return t
}

// NewDBs makes the two fresh databases of a run on s's server: the producer's
// (migrated with producer's schema) and billing's, so rows can be preloaded
// and triggers installed before anything starts. drop removes both.
func NewDBs(ctx context.Context, s *sitting.Sitting, producer sitting.Schema) (prodURL, bilURL string, drop func(), err error) {
	if prodURL, err = s.Env.Create(ctx, producer); err != nil {
		return "", "", nil, err
	}
	if bilURL, err = s.Env.Create(ctx, sitting.SchemaBilling); err != nil {
		s.Env.Drop(context.WithoutCancel(ctx), prodURL)
		return "", "", nil, err
	}
	return prodURL, bilURL, func() {
		s.Env.Drop(context.WithoutCancel(ctx), prodURL)
		s.Env.Drop(context.WithoutCancel(ctx), bilURL)
	}, nil
}

// StartPair starts billing on bilURL, then labeling on labURL delivering to
// it through t, each once its /readyz answers 200.
func StartPair(ctx context.Context, s *sitting.Sitting, labURL, bilURL string, t Transport) (*Pair, error) {
	bil, err := start(ctx, s, "billing", append([]string{"DATABASE_URL=" + bilURL}, t.Bil...))
	if err != nil {
		return nil, err
	}
	billingURL := "http://" + bil.addr
	if t.Name != "http" {
		// Nothing listens here: a binary that ignored EVENTS_TRANSPORT could not
		// deliver over HTTP behind the benchmark's back.
		billingURL = "http://127.0.0.1:9"
	}
	lab, err := start(ctx, s, "labeling", append([]string{"DATABASE_URL=" + labURL, "BILLING_URL=" + billingURL}, t.Lab...))
	if err != nil {
		bil.stop()
		return nil, err
	}
	return &Pair{labURL: labURL, bilURL: bilURL, billing: bil, labeling: lab}, nil
}

// Stop stops labeling, then billing.
func (p *Pair) Stop() {
	p.labeling.stop()
	p.billing.stop()
}

// Drain starts the pair on fresh databases, waits until both answer /readyz,
// then commits n events to labeling's outbox in one transaction (with the
// wake-up a replica's Nudge sends on PostgreSQL; on SQLite, where only an
// append in labeling's own process wakes its relay, n-1 rows and then one
// activation POSTed) and measures events/s from that commit to the last
// receipt's stamp (package drain): start-up is not in the figure.
func Drain(ctx context.Context, s *sitting.Sitting, n int, t Transport) (float64, error) {
	lab, err := db.NewLabeling(ctx, s, false)
	if err != nil {
		return 0, err
	}
	defer lab.Close()
	bil, err := db.NewBilling(ctx, s, false)
	if err != nil {
		return 0, err
	}
	defer bil.Close()
	if s.Opt.SQLite {
		if err := lab.Seed(ctx, latency.Rules); err != nil {
			return 0, err
		}
	}
	if err := t.reset(ctx); err != nil {
		return 0, err
	}
	p, err := StartPair(ctx, s, lab.URL, bil.URL, t)
	if err != nil {
		return 0, err
	}
	defer p.Stop()
	pr := drain.ProbesOf(s)
	// Over NATS the relay settles a row once the broker has it; billing applies
	// it later, so the warm-up and the drain wait for billing's receipts too.
	warmed := 0
	done := drain.NoRow(ctx, lab.Q, pr.Pending)
	if t.Name != "http" {
		pending, applied := done, drain.CountAtLeast(ctx, bil.Q, &warmed)
		done = func() (bool, error) {
			if ok, err := pending(); !ok || err != nil {
				return ok, err
			}
			return applied()
		}
	}
	client := &http.Client{Timeout: 5 * time.Second}
	woken := 0
	commit := func(n int) (time.Time, error) {
		if !s.Opt.SQLite {
			return lab.Commit(ctx, n, false)
		}
		start := time.Now()
		if n > 1 {
			var err error
			if start, err = lab.Commit(ctx, n-1, false); err != nil {
				return start, err
			}
		}
		r, active := latency.Toggle(woken)
		woken++
		return start, postActivation(ctx, client, "http://"+p.labeling.addr, r, active)
	}
	if _, err := drain.WarmUp(ctx, func() (time.Time, error) {
		warmed++
		return commit(1)
	}, done, drain.StampOf(ctx, bil.Q, pr.ReceiptsEnd)); err != nil {
		return 0, err
	}
	start, err := commit(n)
	if err != nil {
		return 0, err
	}
	probe := drain.Probe{Q: lab.Q, Probe: pr.Pending, From: pr.PendingFrom, CountLeft: pr.PendingCount, EndDB: bil.Q, EndSQL: pr.ReceiptsEnd}
	if t.Name != "http" {
		probe.Effects, probe.EffectsSQL, probe.Warmed = bil.Q, pr.ReceiptsCount, warmed
	}
	end, left, err := probe.Wait(ctx, n, s.Opt.DrainLimit)
	return drain.Rate(s, t.Name+" drain", n, start, end, left, err)
}

// postActivation activates (or deactivates) rule r over labeling's HTTP API at
// base.
func postActivation(ctx context.Context, client *http.Client, base string, r int, active bool) error {
	verb := "deactivate"
	if active {
		verb = "activate"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		fmt.Sprintf("%s/v1/orgs/%s/rules/%s/%s", base, db.OrgID(r%db.Orgs), db.RuleID(r), verb), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s rule %d: %s", verb, r, resp.Status)
	}
	return nil
}

// Latency offers activations over labeling's HTTP API at rate for the
// latency duration, through the real pair.
func Latency(ctx context.Context, s *sitting.Sitting, rate int, t Transport) (latency.Outcome, error) {
	lab, err := db.NewLabeling(ctx, s, true)
	if err != nil {
		return latency.Outcome{}, err
	}
	defer lab.Close()
	bil, err := db.NewBilling(ctx, s, true)
	if err != nil {
		return latency.Outcome{}, err
	}
	defer bil.Close()
	if err := lab.Seed(ctx, latency.Rules); err != nil {
		return latency.Outcome{}, err
	}
	if err := t.reset(ctx); err != nil {
		return latency.Outcome{}, err
	}
	p, err := StartPair(ctx, s, lab.URL, bil.URL, t)
	if err != nil {
		return latency.Outcome{}, err
	}
	defer p.Stop()
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: latency.Senders, MaxConnsPerHost: latency.Senders},
	}
	base := "http://" + p.labeling.addr
	return latency.Measure(ctx, lab.Q, bil.Q, s.Opt.LatencyGrace, func() (latency.Offered, error) {
		return latency.Offer(ctx, rate, s.Opt.LatencyDuration, latency.Senders, func(ctx context.Context, k int) error {
			r, active := latency.Toggle(k)
			return postActivation(ctx, client, base, r, active)
		})
	})
}

// reset prepares the transport for a run (Transport.Reset).
func (t Transport) reset(ctx context.Context) error {
	if t.Reset == nil {
		return nil
	}
	return t.Reset(ctx)
}

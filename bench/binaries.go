package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The HTTP rows run the real binaries, built from the project root with go
// build, each on a free loopback port with a fresh database of its own.

const eventsToken = "bench-events-token"

// buildBinaries builds cmd/labeling and cmd/billing into dir.
func buildBinaries(ctx context.Context, root, dir string) error {
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

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// start runs bin serve with env (plus HTTP_ADDR on a free loopback port) and
// waits until its /readyz answers 200.
func (b *bench) start(ctx context.Context, name string, env []string) (*process, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(b.tmp, fmt.Sprintf("%s-%d.log", name, time.Now().UnixNano()))
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(b.bin, name), "serve")
	cmd.Env = append(append(os.Environ(), env...), "HTTP_ADDR="+addr, "EVENTS_TOKEN="+eventsToken, "AUTH_DISABLED=true")
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
			return fmt.Errorf("%s exited at start: %s", p.name, tail(p.log))
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
	return fmt.Errorf("%s not ready after %s: %s", p.name, limit, tail(p.log))
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

// stopAll stops every process still running (Ctrl-C, or an error).
func stopAll() {
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

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log)"
	}
	s := strings.TrimSpace(string(b))
	if len(s) > 2000 {
		s = "…" + s[len(s)-2000:]
	}
	return s
}

// pair is a billing and a labeling process on fresh databases.
type pair struct {
	labURL, bilURL string
	billing        *process
	labeling       *process
}

// transport is how labeling hands events to billing in an HTTP-rows run.
type transport struct {
	name string    // "http" or "nats"
	lab  []string  // extra labeling environment
	bil  []string  // extra billing environment
	nats *natsRows // the server of a "nats" transport
}

var httpTransport = transport{name: "http"}

// cloudEvents is t with labeling writing CloudEvents in binary mode
// (EVENTS_FORMAT=cloudevents) instead of the envelope.
func (t transport) cloudEvents() transport {
	t.lab = append(slices.Clone(t.lab), "EVENTS_FORMAT=cloudevents")
	return t
}

// newDBs makes the two fresh databases of a run: the producer's (migrated
// with producer's schema) and billing's, so rows can be preloaded and triggers
// installed before anything starts. drop removes both.
func (b *bench) newDBs(ctx context.Context, producer schema) (prodURL, bilURL string, drop func(), err error) {
	if prodURL, err = b.env.create(ctx, producer); err != nil {
		return "", "", nil, err
	}
	if bilURL, err = b.env.create(ctx, schemaBilling); err != nil {
		b.env.drop(context.WithoutCancel(ctx), prodURL)
		return "", "", nil, err
	}
	return prodURL, bilURL, func() {
		b.env.drop(context.WithoutCancel(ctx), prodURL)
		b.env.drop(context.WithoutCancel(ctx), bilURL)
	}, nil
}

// startPair starts billing, then labeling delivering to it.
func (b *bench) startPair(ctx context.Context, labURL, bilURL string, t transport) (*pair, error) {
	bil, err := b.start(ctx, "billing", append([]string{"DATABASE_URL=" + bilURL}, t.bil...))
	if err != nil {
		return nil, err
	}
	billingURL := "http://" + bil.addr
	if t.name != "http" {
		// Nothing listens here: a binary that ignored EVENTS_TRANSPORT could not
		// deliver over HTTP behind the benchmark's back.
		billingURL = "http://127.0.0.1:9"
	}
	lab, err := b.start(ctx, "labeling", append([]string{"DATABASE_URL=" + labURL, "BILLING_URL=" + billingURL}, t.lab...))
	if err != nil {
		bil.stop()
		return nil, err
	}
	return &pair{labURL: labURL, bilURL: bilURL, billing: bil, labeling: lab}, nil
}

func (p *pair) stop() {
	p.labeling.stop()
	p.billing.stop()
}

// httpDrain starts the pair on fresh databases, waits until both answer
// /readyz, then commits n events to labeling's outbox in one transaction (with
// the wake-up a replica's Nudge sends on PostgreSQL; on SQLite, where only an
// append in labeling's own process wakes its relay, n-1 rows and then one
// activation POSTed) and measures events/s from that commit to the last
// receipt's stamp (drain.go): start-up is not in the figure.
func (b *bench) httpDrain(ctx context.Context, n int, t transport) (float64, error) {
	lab, err := b.newLabeling(ctx, false)
	if err != nil {
		return 0, err
	}
	defer lab.close()
	bil, err := b.newBilling(ctx, false)
	if err != nil {
		return 0, err
	}
	defer bil.close()
	if b.opt.sqlite {
		if err := lab.seed(ctx, latencyRules); err != nil {
			return 0, err
		}
	}
	if err := t.reset(ctx, b); err != nil {
		return 0, err
	}
	p, err := b.startPair(ctx, lab.url, bil.url, t)
	if err != nil {
		return 0, err
	}
	defer p.stop()
	pr := b.probes()
	// Over NATS the relay settles a row once the broker has it; billing applies
	// it later, so the warm-up and the drain wait for billing's receipts too.
	warmed := 0
	done := noRow(ctx, lab.q, pr.pending)
	if t.name != "http" {
		pending, applied := done, countAtLeast(ctx, bil.q, &warmed)
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
		if !b.opt.sqlite {
			return lab.commit(ctx, n, false)
		}
		start := time.Now()
		if n > 1 {
			var err error
			if start, err = lab.commit(ctx, n-1, false); err != nil {
				return start, err
			}
		}
		r, active := toggle(woken)
		woken++
		return start, postActivation(ctx, client, "http://"+p.labeling.addr, r, active)
	}
	if _, err := warmUp(ctx, func() (time.Time, error) {
		warmed++
		return commit(1)
	}, done, stampOf(ctx, bil.q, pr.receiptsEnd)); err != nil {
		return 0, err
	}
	start, err := commit(n)
	if err != nil {
		return 0, err
	}
	probe := drainProbe{q: lab.q, probe: pr.pending, from: pr.pendingFrom, countLeft: pr.pendingCount, endDB: bil.q, endSQL: pr.receiptsEnd}
	if t.name != "http" {
		probe.effects, probe.effectsSQL, probe.warmed = bil.q, pr.receiptsCount, warmed
	}
	end, left, err := probe.wait(ctx, n, b.opt.drainLimit)
	return b.drainRate(t.name+" drain", n, start, end, left, err)
}

// postActivation activates (or deactivates) rule r over labeling's HTTP API at
// base.
func postActivation(ctx context.Context, client *http.Client, base string, r int, active bool) error {
	verb := "deactivate"
	if active {
		verb = "activate"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		fmt.Sprintf("%s/v1/orgs/%s/rules/%s/%s", base, orgID(r%orgs), ruleID(r), verb), nil)
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

// httpLatency offers activations over labeling's HTTP API at rate for the
// latency duration, through the real pair.
func (b *bench) httpLatency(ctx context.Context, rate int, t transport) (latency, error) {
	lab, err := b.newLabeling(ctx, true)
	if err != nil {
		return latency{}, err
	}
	defer lab.close()
	bil, err := b.newBilling(ctx, true)
	if err != nil {
		return latency{}, err
	}
	defer bil.close()
	if err := lab.seed(ctx, latencyRules); err != nil {
		return latency{}, err
	}
	if err := t.reset(ctx, b); err != nil {
		return latency{}, err
	}
	p, err := b.startPair(ctx, lab.url, bil.url, t)
	if err != nil {
		return latency{}, err
	}
	defer p.stop()
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{MaxIdleConnsPerHost: latencySenders, MaxConnsPerHost: latencySenders},
	}
	base := "http://" + p.labeling.addr
	return measureLatency(ctx, lab.q, bil.q, b.opt.latencyGrace, func() (offered, error) {
		return offer(ctx, rate, b.opt.latencyDuration, latencySenders, func(ctx context.Context, k int) error {
			r, active := toggle(k)
			return postActivation(ctx, client, base, r, active)
		})
	})
}

// reset prepares the transport for a run: for NATS, deletes the stream so the
// run starts on an empty one.
func (t transport) reset(ctx context.Context, b *bench) error {
	if t.name != "nats" {
		return nil
	}
	return t.nats.deleteStream(ctx)
}

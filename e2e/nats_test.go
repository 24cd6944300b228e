package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// The transports every crash scenario runs over (contract section 7).
const (
	transportHTTP = "http"
	transportNATS = "nats"
)

var transports = []string{transportHTTP, transportNATS}

// natsServerBin is the nats-server the NATS scenarios run as real processes:
// $NATS_SERVER_BIN, else nats-server on PATH or /usr/sbin, else one built from
// the module's own github.com/nats-io/nats-server/v2 (go.mod pins it) into the
// build directory.
var natsServerBin string

func findNATSServer() (string, error) {
	if p := os.Getenv("NATS_SERVER_BIN"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("nats-server"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/nats-server"); err == nil {
		return "/usr/sbin/nats-server", nil
	}
	return buildNATSServer()
}

// buildNATSServer builds the module's own nats-server (the version go.mod
// pins) among the suite's binaries, which TestMain removes.
func buildNATSServer() (string, error) {
	bin, err := proctest.Binary("github.com/nats-io/nats-server/v2")
	if err != nil {
		return "", fmt.Errorf("no nats-server (set NATS_SERVER_BIN, install it, or let go build it): %w", err)
	}
	return bin, nil
}

// natsClusterBin is the nats-server of the cluster scenarios: natsServerBin if
// it is 2.10 or later, else the module's own. A 2.9 cluster removes a message of
// an interest stream on one durable's ack after the stream leader is lost,
// though another durable has not had it (fixed in 2.10: the README's
// "Versions"); the suite's audit durable would miss events for the server's
// defect, not the pair's.
var natsClusterBin = sync.OnceValues(func() (string, error) {
	out, err := exec.Command(natsServerBin, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", natsServerBin, err)
	}
	var major, minor int
	if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "nats-server: v%d.%d", &major, &minor); err != nil {
		return "", fmt.Errorf("%s --version: %q: %w", natsServerBin, out, err)
	}
	if major > 2 || (major == 2 && minor >= 10) {
		return natsServerBin, nil
	}
	return buildNATSServer()
})

// natsNode is one nats-server process with JetStream, restartable on the same
// ports and store directory, so a restart finds the stream it stored.
type natsNode struct {
	t      *testing.T
	bin    string // natsServerBin, or natsClusterBin in a cluster
	name   string
	addr   string // client address
	args   []string
	life   *proctest.Process
	starts int
}

// startNATS starts n JetStream servers on loopback: one standalone server, or a
// cluster of n routed to each other. It returns when each accepts connections
// and JetStream answers (for a cluster: a meta leader is elected).
func startNATS(t *testing.T, n int) []*natsNode {
	t.Helper()
	nodes := make([]*natsNode, n)
	routes := make([]string, n)
	clusterAddrs := make([]string, n)
	for i := range n {
		clusterAddrs[i] = freeAddr(t)
		routes[i] = "nats://" + clusterAddrs[i]
	}
	bin := natsServerBin
	if n > 1 {
		var err error
		bin, err = natsClusterBin()
		require.NoError(t, err)
		t.Logf("e2e: the cluster runs %s", bin)
	}
	for i := range n {
		node := &natsNode{t: t, bin: bin, name: fmt.Sprintf("nats-%d", i+1), addr: freeAddr(t)}
		host, port, _ := strings.Cut(node.addr, ":")
		node.args = []string{"-a", host, "-p", port, "-n", node.name, "-js", "-sd", t.TempDir()}
		if n > 1 {
			node.args = append(node.args, "--cluster_name", "e2e", "--cluster", "nats://"+clusterAddrs[i],
				"--routes", strings.Join(routes, ","))
		}
		nodes[i] = node
		node.start()
	}
	js := natsClient(t, nodes)
	waitFor(t, readyTimeout, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_, err := js.AccountInfo(ctx)
		return err == nil
	}, "JetStream answers on %d node(s)", n)
	return nodes
}

func (n *natsNode) start() {
	n.t.Helper()
	n.starts++
	n.life = proctest.Start(n.t, n.bin, map[string]string{}, n.args...)
	n.t.Logf("e2e: start #%d of %s on %s (pid %d)", n.starts, n.name, n.addr, n.life.Pid())
	waitFor(n.t, readyTimeout, func() bool {
		select {
		case <-n.life.Done():
			require.FailNow(n.t, n.name+" exited: "+n.life.Output.Tail(20))
		default:
		}
		nc, err := nats.Connect("nats://"+n.addr, nats.Timeout(time.Second))
		if err != nil {
			return false
		}
		nc.Close()
		return true
	}, "%s accepts connections", n.name)
}

// kill sends SIGKILL to the server: one of the scenario's kills.
func (n *natsNode) kill() {
	n.life.Kill(n.t)
	tally.add(func(s *counts) { s.kills++ })
}

func (n *natsNode) signal(sig syscall.Signal) { n.life.Signal(n.t, sig) }

func natsURL(nodes []*natsNode) string {
	urls := make([]string, len(nodes))
	for i, n := range nodes {
		urls[i] = "nats://" + n.addr
	}
	return strings.Join(urls, ",")
}

// natsClient is the test's own JetStream client of nodes.
func natsClient(t *testing.T, nodes []*natsNode) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(natsURL(nodes), nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1),
		nats.ReconnectWait(100*time.Millisecond), nats.Timeout(time.Second))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// auditDurable is the test's second consumer: a team beside billing, reading
// the same stream with a durable of its own, without touching labeling.
const auditDurable = "e2e-audit"

// requireAuditSawEvery reads the audit consumer from the start of the stream
// and requires that it sees every outbox row's id, though billing consumed them
// long before: the stream fans out, and keeps each event until every durable
// has it.
func (c *cluster) requireAuditSawEvery(t *testing.T, s snapshot) {
	t.Helper()
	if c.cfg.billingDurableOnly {
		return // no audit durable: billing's receipts are the check
	}
	js := natsClient(t, c.nats)
	ctx, cancel := context.WithTimeout(context.Background(), convergeTimeout)
	defer cancel()
	var cons jetstream.Consumer
	waitFor(t, convergeTimeout, func() bool {
		// Labeling made it (NATS_CONSUMERS) before its first publish, so the
		// interest stream kept every event for it.
		var err error
		cons, err = js.Consumer(ctx, stream.Name, auditDurable)
		return err == nil
	}, "the audit consumer exists")
	want := map[string]bool{}
	for _, r := range s.outbox {
		want[r.ID.String()] = true
	}
	seen := map[string]bool{}
	deadline := time.Now().Add(convergeTimeout)
	for len(seen) < len(want) && time.Now().Before(deadline) {
		batch, err := cons.Fetch(100, jetstream.FetchMaxWait(500*time.Millisecond))
		if err != nil {
			continue
		}
		for m := range batch.Messages() {
			seen[m.Headers().Get(nats.MsgIdHdr)] = true
			require.NoError(t, m.Ack())
		}
		if err := batch.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) {
			t.Logf("audit fetch: %v", err)
		}
	}
	for id := range want {
		require.True(t, seen[id], "the audit consumer never saw event %s", id)
	}
	t.Logf("audit consumer saw all %d events (%d distinct ids)", len(want), len(seen))
}

// streamLeader names the node that leads the stream (R3: a Raft group).
func streamLeader(t *testing.T, js jetstream.JetStream) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, stream.Name)
	if err != nil {
		return ""
	}
	info, err := st.Info(ctx)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}

// logConsumer logs the broker's view of billing's consumer, for a failed scenario.
func (c *cluster) logConsumer(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	cons, err := natsClient(t, c.nats).Consumer(ctx, stream.Name, "billing")
	if err != nil {
		t.Logf("billing's consumer: %v", err)
		return
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Logf("billing's consumer: %v", err)
		return
	}
	t.Logf("billing's consumer: pending %d, ack pending %d, redelivered %d, waiting pulls %d, delivered %+v, ack floor %+v",
		info.NumPending, info.NumAckPending, info.NumRedelivered, info.NumWaiting, info.Delivered, info.AckFloor)
}

package e2e

import (
	"fmt"
	"io"
	"log"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// TestMixedVersions is a rolling deploy and its rollback under load: the
// previous release's replicas (previousRelease, built from git) and today's run
// at once, both services, on the same databases, over each transport and
// dialect, with billing calling the stand-in provider (the second hop).
//
// Upgrade, consumers before producers: the databases are created by the old
// release; a new billing starts beside the old one (it migrates billing's
// database under it), then a new labeling beside the old one; old replicas are
// SIGKILLed and restarted, then retired with SIGTERM. Rollback, producers
// first: an old labeling starts on today's schema beside the new one, then an
// old billing; the new replicas are SIGKILLed and restarted, then retired. Every
// step happens while clients keep creating, activating and deactivating rules
// through whichever labeling replicas are up, and HTTP deliveries reach
// whichever billing replicas are up (a balancer in front of them, as in a
// deploy). Nothing is lost, nothing applied twice on either hop, no process
// crashes (each retirement exits 0), and the old release's operator commands
// read today's schema: `labeling outbox failed`, `billing outbox failed` and,
// over NATS, `billing nats failed`, each listing a row of today's.
func TestMixedVersions(t *testing.T) {
	t.Parallel()
	require.NoError(t, buildPrevious(), "the previous release's binaries")
	eachDialectTransport(t, mixedVersions)
}

// fleet is the replicas of one service that are up, for the load's target and
// the balancer: read by their goroutines, changed by the test's.
type fleet struct {
	mu    sync.Mutex
	procs []*proc
}

func (f *fleet) add(p *proc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.procs = append(f.procs, p)
}

func (f *fleet) remove(p *proc) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, q := range f.procs {
		if q == p {
			f.procs = append(f.procs[:i], f.procs[i+1:]...)
			return
		}
	}
}

// pick is a replica at random; a request to one being restarted fails and is
// sent again, to another pick.
func (f *fleet) pick() *proc {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.procs[rand.IntN(len(f.procs))]
}

// balance serves BILLING_URL for every labeling replica: each delivery goes to
// a billing replica of the fleet at random (502 when it is down: the relay
// retries).
func balance(t *testing.T, billing *fleet) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			u, _ := url.Parse(billing.pick().url())
			r.SetURL(u)
		},
		Transport: &http.Transport{DisableKeepAlives: true},
		// A delivery to a replica being killed is a 502 the relay retries, not news.
		ErrorLog: log.New(io.Discard, "", 0),
	}
	srv := &http.Server{Handler: proxy, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + l.Addr().String()
}

func mixedVersions(t *testing.T, d sqldb.Dialect, tr string) {
	started := time.Now()
	labs, bills := &fleet{}, &fleet{}
	provider := startStandIn(t, 0)
	c := setup(t, config{
		dialect: d, transport: tr, provider: provider, unmigrated: true,
		labelingBinary: previousLabelingBin, billingBinary: previousBillingBin,
		env: map[string]string{"BILLING_URL": balance(t, bills)},
	})
	c.lab().name, c.billing.name = "labeling-old-1", "billing-old-1"
	labs.add(c.lab())
	bills.add(c.billing)
	extraBilling := []*proc{}
	// replica starts another replica of a service (its environment, a build)
	// and puts it in the fleet.
	replica := func(name, bin string, like *proc, f *fleet) *proc {
		p := newProc(t, name, bin, maps.Clone(like.env))
		p.secondHop = like.secondHop
		p.launch(t, "")
		f.add(p)
		if p.isBilling() {
			extraBilling = append(extraBilling, p)
		} else {
			c.labeling = append(c.labeling, p)
		}
		return p
	}
	kills, terms := 0, 0
	kill := func(p *proc) {
		t.Logf("kill -9 %s (pid %d)", p.name, p.pid())
		p.kill()
		p.restart(t)
		kills++
	}
	retire := func(p *proc, f *fleet) {
		f.remove(p)
		t.Logf("SIGTERM %s (pid %d): retired", p.name, p.pid())
		state, took := p.terminate(t)
		require.Equal(t, 0, state.ExitCode(), "%s exits 0 on SIGTERM (%s after %s)", p.name, state, took)
		terms++
	}

	l := startLoad(t, c, loadOptions{clients: 4, rules: 3, maxOps: 100000, pace: 20 * time.Millisecond, target: labs.pick})
	step := func(what string) {
		t.Logf("mixed versions: %s", what)
		l.waitOps(t, 10)
	}
	step("the previous release alone")

	// Upgrade: consumers first.
	newBill := replica("billing-new-1", billingBin, c.billing, bills)
	step("old and new billing")
	kill(c.billing)
	step("old billing killed and restarted beside the new one")
	newLab := replica("labeling-new-1", labelingBin, c.lab(), labs)
	step("old and new of both services")
	kill(c.lab())
	kill(newBill)
	step("old labeling and new billing killed and restarted")
	retire(c.billing, bills)
	retire(c.lab(), labs)
	step("today's release alone")
	kill(newLab)
	step("new labeling killed and restarted")

	// Rollback: producers first, on today's schema.
	oldLab := replica("labeling-old-2", previousLabelingBin, newLab, labs)
	step("old labeling back beside the new one")
	oldBill := replica("billing-old-2", previousBillingBin, newBill, bills)
	step("old and new of both services again")
	kill(newLab)
	kill(oldBill)
	step("new labeling and old billing killed and restarted")
	retire(newLab, labs)
	retire(newBill, bills)
	step("the previous release alone again")
	kill(oldLab)
	step("old labeling killed and restarted")
	l.finish(t)

	s, took := c.requireConverged(t)
	l.requireFinalStates(t, s)
	dups := 0
	for _, p := range extraBilling {
		dups += p.duplicatesSoFar(t)
	}
	tally.add(func(k *counts) { k.duplicates += dups })
	dups += c.billing.duplicates
	a := provider.applied()
	t.Logf("mixed versions %s and %s: %d kills, %d retirements, %d events, %d QuotaChanged applied by the provider, "+
		"%d duplicates absorbed by receipts, %d by the provider; converged in %s; %s in all",
		previousCommit[:7], "today's", kills, terms, len(s.outbox), a.Applied, dups, a.Duplicates,
		took.Round(time.Millisecond), time.Since(started).Round(time.Millisecond))

	// The old release's operator commands on today's schema, each listing a
	// dead letter of today's: a row failed in each outbox and, over NATS, a
	// message billing (today's) terminated.
	deadLetter(t, c.labQ.Exec, "outbox_events")
	deadLetter(t, c.billQ.Exec, billingOutboxTable)
	operator(t, previousLabelingBin, oldLab.env["DATABASE_URL"], "e2e: dead-lettered", "outbox", "failed")
	operator(t, previousBillingBin, oldBill.env["DATABASE_URL"], "e2e: dead-lettered", "outbox", "failed")
	if tr == transportNATS {
		terminated(t, c)
		operator(t, previousBillingBin, oldBill.env["DATABASE_URL"], "e2e.mixed", "nats", "failed")
	}
}

// deadLetter fails the oldest processed row of table, as a dead letter of
// today's release would be stored.
func deadLetter(t *testing.T, exec func(testing.TB, string, ...any) int64, table string) {
	t.Helper()
	n := exec(t, `UPDATE `+table+` SET failed_at = processed_at, processed_at = NULL, last_error = 'e2e: dead-lettered by the test'
		WHERE id = (SELECT id FROM `+table+` WHERE processed_at IS NOT NULL ORDER BY created_at, id LIMIT 1)`)
	require.EqualValues(t, 1, n, "a row of %s dead-lettered", table)
}

// terminated publishes an unsigned message on the stream and waits until
// billing recorded it in billing_nats_failed.
func terminated(t *testing.T, c *cluster) {
	t.Helper()
	nc, err := nats.Connect(natsURL(c.nats), nats.Timeout(2*time.Second))
	require.NoError(t, err)
	defer nc.Close()
	msg := nats.NewMsg(stream.SubjectPrefix + "E2eMixed")
	msg.Header.Set(nats.MsgIdHdr, "e2e.mixed")
	msg.Data = []byte(`{"id":"not signed"}`)
	js, err := nc.JetStream()
	require.NoError(t, err)
	_, err = js.PublishMsg(msg)
	require.NoError(t, err)
	waitFor(t, convergeTimeout, func() bool {
		return c.billQ.Count(t, `SELECT count(*) FROM billing_nats_failed`) == 1
	}, "billing records the unsigned message")
}

// operator runs bin's operator command args on the database at dbURL: it
// exits 0 and its output names want.
func operator(t *testing.T, bin, dbURL, want string, args ...string) {
	t.Helper()
	p := proctest.Start(t, bin, map[string]string{"DATABASE_URL": dbURL}, args...)
	state := p.Wait(t, 30*time.Second)
	out := p.Output.String()
	require.Equal(t, 0, state.ExitCode(), "%s %s on today's schema: %s", bin, strings.Join(args, " "), out)
	require.Contains(t, out, want, "%s %s lists today's row", bin, strings.Join(args, " "))
	t.Logf("the previous release's `%s` on today's schema: %s", strings.Join(args, " "), lineWith(out, want))
}

// lineWith is the first line of s that contains want, clipped.
func lineWith(s, want string) string {
	for line := range strings.Lines(s) {
		if strings.Contains(line, want) {
			return fmt.Sprintf("%.160s", strings.TrimSpace(line))
		}
	}
	return ""
}

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// load is a few concurrent clients, each with its own org and rules, cycling
// every rule through create, activate, deactivate, reactivate... Each client
// sends one request at a time and retries it until it gets an answer, so the
// state it last set is always known, however often a service dies under it.
type load struct {
	c       *cluster
	clients []*loadClient
	stop    chan struct{}
	wg      sync.WaitGroup
	ops     atomic.Int64 // requests answered as wanted

	mu   sync.Mutex
	errs []error
}

type loadClient struct {
	org   uuid.UUID
	rules []*ruleState
}

// ruleState is what the client knows of its rule from the answers it got.
type ruleState struct {
	id          uuid.UUID
	created     bool
	active      bool
	transitions int // state changes the client made: each appends exactly one event
}

// loadOptions shape a load.
type loadOptions struct {
	clients  int
	rules    int           // per client
	maxOps   int           // per client; the load ends earlier on finish
	pace     time.Duration // pause between a client's requests
	replicas bool          // spread requests over every labeling process
	// target, when set, picks the process of each request (and of each retry):
	// a scenario that starts and stops labeling processes under load.
	target func() *proc
}

// startLoad starts the clients; finish stops them.
func startLoad(t *testing.T, c *cluster, o loadOptions) *load {
	t.Helper()
	l := &load{c: c, stop: make(chan struct{})}
	for range o.clients {
		lc := &loadClient{org: uuid.New()}
		for range o.rules {
			lc.rules = append(lc.rules, &ruleState{id: uuid.New()})
		}
		l.clients = append(l.clients, lc)
	}
	target := c.lab
	if o.replicas {
		target = func() *proc { return c.labeling[rand.IntN(len(c.labeling))] }
	}
	if o.target != nil {
		target = o.target
	}
	for _, lc := range l.clients {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			if err := l.run(lc, target, o); err != nil {
				l.mu.Lock()
				l.errs = append(l.errs, fmt.Errorf("client of org %s: %w", lc.org, err))
				l.mu.Unlock()
			}
		}()
	}
	return l
}

func (l *load) run(lc *loadClient, target func() *proc, o loadOptions) error {
	ctx := context.Background()
	for i := 0; i < o.maxOps; i++ {
		select {
		case <-l.stop:
			return nil
		default:
		}
		r := lc.rules[i%len(lc.rules)]
		switch {
		case !r.created:
			if _, _, err := l.c.sendUntil(ctx, target, http.MethodPost, rulesPath(lc.org), newRuleBody(r.id), http.StatusCreated, http.StatusOK); err != nil {
				return err
			}
			r.created = true
		default:
			action, want := "activate", true
			if r.active {
				action, want = "deactivate", false
			}
			_, b, err := l.c.sendUntil(ctx, target, http.MethodPost, rulePath(lc.org, r.id, action), nil, http.StatusOK)
			if err != nil {
				return err
			}
			var got rule
			if err := json.Unmarshal(b, &got); err != nil {
				return err
			}
			if got.Active != want {
				return fmt.Errorf("%s of rule %s answered active=%v", action, r.id, got.Active)
			}
			r.active = want
			r.transitions++
		}
		l.ops.Add(1)
		select {
		case <-l.stop:
			return nil
		case <-time.After(o.pace):
		}
	}
	return nil
}

// waitOps waits, bounded, until the clients have had n more requests answered:
// the load is really running across whatever the scenario does next.
func (l *load) waitOps(t *testing.T, n int64) {
	t.Helper()
	from := l.ops.Load()
	waitFor(t, retryTimeout, func() bool { return l.ops.Load() >= from+n || l.failed() },
		"the load made no progress")
	require.False(t, l.failed(), "a client failed: %v", l.errors())
}

func (l *load) failed() bool { return len(l.errors()) > 0 }

func (l *load) errors() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errs...)
}

// finish stops the clients after their current request and waits for them.
func (l *load) finish(t *testing.T) {
	t.Helper()
	close(l.stop)
	done := make(chan struct{})
	go func() { l.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(retryTimeout + 10*time.Second):
		t.Fatal("the load clients did not stop")
	}
	require.Empty(t, l.errors(), "every client request got its answer")
	t.Logf("load: %d requests answered", l.ops.Load())
}

// requireFinalStates checks what the clients know against the converged
// snapshot: every rule is stored in the state its client last set, and the
// outbox holds exactly one event per state change (none lost to a kill, none
// doubled by a retry).
func (l *load) requireFinalStates(t *testing.T, s snapshot) {
	t.Helper()
	transitions := 0
	for _, lc := range l.clients {
		var active int64
		for _, r := range lc.rules {
			if !r.created {
				continue
			}
			require.Equal(t, r.active, l.c.ruleActive(t, r.id), "rule %s of org %s ends in the state its client last set", r.id, lc.org)
			transitions += r.transitions
			if r.active {
				active++
			}
		}
		require.Equal(t, active, s.quota[lc.org], "org %s: billing counts the rules its client left active", lc.org)
	}
	require.Len(t, s.outbox, transitions, "one outbox row per state change the clients made")
}

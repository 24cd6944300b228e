package outbox_test

import (
	"errors"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// blackhole is a TCP proxy to a real server that can stop forwarding without
// closing anything: what a partition that drops packets looks like to a
// client (writes succeed, no answer ever comes, no error either).
type blackhole struct {
	ln      net.Listener
	target  string
	dropped atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
	done  bool
}

// newBlackhole forwards to target until Drop; it is closed when t ends.
func newBlackhole(t testing.TB, target string) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &blackhole{ln: ln, target: target}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

// viaBlackhole is dbURL with its host replaced by a new blackhole's address.
func viaBlackhole(t testing.TB, dbURL string) (string, *blackhole) {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	p := newBlackhole(t, u.Host)
	u.Host = p.ln.Addr().String()
	return u.String(), p
}

// Drop stops forwarding in both directions, on every connection old and new.
func (p *blackhole) Drop() { p.dropped.Store(true) }

func (p *blackhole) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(c) {
			return
		}
		go p.forward(c)
	}
}

func (p *blackhole) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.done {
		c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

func (p *blackhole) forward(client net.Conn) {
	if p.dropped.Load() {
		pump(io.Discard, client, &p.dropped) // a new connection is never answered
		return
	}
	server, err := net.Dial("tcp", p.target)
	if err != nil {
		client.Close()
		return
	}
	if !p.track(server) {
		return
	}
	go pump(server, client, &p.dropped)
	pump(client, server, &p.dropped)
}

// pump copies src to dst until src fails, discarding what it reads once
// dropped is set.
func pump(dst io.Writer, src io.Reader, dropped *atomic.Bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !dropped.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *blackhole) close() {
	p.mu.Lock()
	p.done = true
	conns := p.conns
	p.mu.Unlock()
	err := p.ln.Close()
	for _, c := range conns {
		err = errors.Join(err, c.Close())
	}
	_ = err // closing is best effort: the test is over
}

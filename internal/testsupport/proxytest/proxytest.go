// Package proxytest gives a test a TCP proxy to a real server (a database)
// that can be partitioned and healed: the network failure that refuses
// nothing. During a partition every open connection stays open but its bytes
// are dropped both ways, and a connection opened meanwhile is accepted and
// never reaches the server. Neither side hears of the other, not even of a
// close, so a client learns of it only from its own timeouts, and a server
// session from its own (a transaction it was in stays open, holding its locks,
// until the server ends it).
package proxytest

import (
	"errors"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Proxy forwards TCP connections to its upstream until it is partitioned.
//
// A healed partition forwards new connections again. A connection cut by the
// partition stays cut until the proxy closes: bytes were lost from its stream,
// so it can never carry the protocol again, and its peers are left to find
// that out by themselves, the worst case of a real partition (a lost FIN, no
// keepalive).
type Proxy struct {
	ln       net.Listener
	upstream string

	mu      sync.Mutex
	cut     bool               // partitioned now
	conns   map[*conn]struct{} // every connection not yet closed
	stopped bool
	wg      sync.WaitGroup
	once    sync.Once

	cutN    atomic.Int64 // connections a partition cut
	dropped atomic.Int64 // bytes clients sent into a partition
}

// conn is one client connection and, unless a partition cut it at birth, its
// upstream connection.
type conn struct {
	client, server net.Conn // server is nil for a connection born in a partition
	cut            atomic.Bool
}

// Start listens on a free loopback port and forwards to upstream (host:port);
// the proxy is closed, with every connection it holds, when t ends.
func Start(t testing.TB, upstream string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &Proxy{ln: ln, upstream: upstream, conns: map[*conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.Close)
	return p
}

// Via starts a proxy to dbURL's host and returns dbURL with its host replaced
// by the proxy's address.
func Via(t testing.TB, dbURL string) (string, *Proxy) {
	t.Helper()
	u, err := url.Parse(dbURL)
	require.NoError(t, err)
	p := Start(t, u.Host)
	u.Host = p.Addr()
	return u.String(), p
}

// Addr is where clients connect instead of the upstream.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Partition cuts every open connection and every one opened until Heal.
func (p *Proxy) Partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		if !c.cut.Swap(true) {
			p.cutN.Add(1)
		}
	}
}

// Heal forwards new connections again; the ones the partition cut stay cut.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

// Cut is how many connections partitions have cut so far.
func (p *Proxy) Cut() int64 { return p.cutN.Load() }

// Dropped is how many bytes clients have sent into a partition: statements
// that will never be answered.
func (p *Proxy) Dropped() int64 { return p.dropped.Load() }

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		c := &conn{client: client}
		p.mu.Lock()
		if p.stopped {
			p.mu.Unlock()
			client.Close()
			return
		}
		born := p.cut
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		if born {
			// The SYN of a real partition would get no answer; here the
			// handshake succeeds and nothing more ever does.
			c.cut.Store(true)
			p.cutN.Add(1)
			p.wg.Add(1)
			go p.pump(c, client, nil, true)
			continue
		}
		p.wg.Add(1)
		go p.connect(c)
	}
}

// connect dials the upstream for c and starts forwarding both ways.
func (p *Proxy) connect(c *conn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		// The upstream is down (not partitioned): the client sees the refusal
		// as a close, as it would connecting directly.
		p.drop(c)
		return
	}
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		server.Close()
		p.drop(c)
		return
	}
	c.server = server
	if p.cut && !c.cut.Swap(true) {
		// Partitioned while dialling: the server's greeting is never seen.
		p.cutN.Add(1)
	}
	p.mu.Unlock()
	p.wg.Add(2)
	go p.pump(c, c.client, server, true)
	go p.pump(c, server, c.client, false)
}

// pump copies src to dst while c is not cut. Once it is, what src sends is
// read and dropped (so no peer blocks on a full buffer, as none would while
// its packets are lost in the network) and src's close is not passed on.
func (p *Proxy) pump(c *conn, src, dst net.Conn, fromClient bool) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if c.cut.Load() || dst == nil {
				if fromClient {
					p.dropped.Add(int64(n))
				}
			} else if _, werr := dst.Write(buf[:n]); werr != nil && !c.cut.Load() {
				p.drop(c)
				return
			}
		}
		if err != nil {
			if !c.cut.Load() || errors.Is(err, net.ErrClosed) {
				p.drop(c)
			}
			// A cut connection's other side stays open: only the proxy's
			// close ends it.
			return
		}
	}
}

// drop closes both sides of c.
func (p *Proxy) drop(c *conn) {
	p.mu.Lock()
	delete(p.conns, c)
	server := c.server
	p.mu.Unlock()
	c.client.Close()
	if server != nil {
		server.Close()
	}
}

// Close stops accepting and closes every connection, cut or not; the test's
// end calls it, and a test may call it earlier (before closing a client pool
// whose goodbyes a partition would swallow). Later calls do nothing.
func (p *Proxy) Close() { p.once.Do(p.close) }

func (p *Proxy) close() {
	p.mu.Lock()
	p.stopped = true
	conns := make([]*conn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
	}
	p.mu.Unlock()
	p.ln.Close()
	for _, c := range conns {
		p.drop(c)
	}
	p.wg.Wait()
}

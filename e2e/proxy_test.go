package e2e

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// blackholeProxy forwards TCP connections from the services to their database
// until it is partitioned. A partition is the network failure that refuses
// nothing: every open connection stays open but its bytes are dropped both
// ways, and a connection opened meanwhile is accepted and never reaches the
// server. Neither side hears of the other, not even of a close, so a client
// learns of it only from its own timeouts, and a server session from its own
// (a transaction it was in stays open, holding its locks, until the server
// ends it).
//
// A healed partition forwards new connections again. A connection cut by the
// partition stays cut until the scenario ends: bytes were lost from its stream,
// so it can never carry the protocol again, and its peers are left to find that
// out by themselves, the worst case of a real partition (a lost FIN, no
// keepalive).
type blackholeProxy struct {
	t        *testing.T
	ln       net.Listener
	upstream string

	mu      sync.Mutex
	cut     bool                    // partitioned now
	conns   map[*proxyConn]struct{} // every connection not yet closed
	stopped bool
	wg      sync.WaitGroup
	cutN    atomic.Int64 // connections a partition cut, for the log
}

// proxyConn is one client connection and, unless a partition cut it at birth,
// its upstream connection.
type proxyConn struct {
	client, server net.Conn // server is nil for a connection born in a partition
	cut            atomic.Bool
}

// startProxy listens on a free loopback port and forwards to upstream; it is
// closed, with every connection it holds, when t ends.
func startProxy(t *testing.T, upstream string) *blackholeProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &blackholeProxy{t: t, ln: ln, upstream: upstream, conns: map[*proxyConn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// addr is where the services connect instead of the database.
func (p *blackholeProxy) addr() string { return p.ln.Addr().String() }

// partition cuts every open connection and every one opened until heal.
func (p *blackholeProxy) partition() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		if !c.cut.Swap(true) {
			p.cutN.Add(1)
		}
	}
}

// heal forwards new connections again; the ones the partition cut stay cut.
func (p *blackholeProxy) heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *blackholeProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		c := &proxyConn{client: client}
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
			go p.pump(c, client, nil)
			continue
		}
		p.wg.Add(1)
		go p.connect(c)
	}
}

// connect dials the database for c and starts forwarding both ways.
func (p *blackholeProxy) connect(c *proxyConn) {
	defer p.wg.Done()
	server, err := net.DialTimeout("tcp", p.upstream, 5*time.Second)
	if err != nil {
		// The database is down (not partitioned): the client sees the refusal
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
	if p.cut {
		// Partitioned while dialling: the server's greeting is never seen.
		if !c.cut.Swap(true) {
			p.cutN.Add(1)
		}
	}
	p.mu.Unlock()
	p.wg.Add(2)
	go p.pump(c, c.client, server)
	go p.pump(c, server, c.client)
}

// pump copies src to dst while c is not cut. Once it is, what src sends is read
// and dropped (so no peer blocks on a full buffer, as none would while its
// packets are lost in the network) and src's close is not passed on.
func (p *blackholeProxy) pump(c *proxyConn, src, dst net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !c.cut.Load() && dst != nil {
			if _, werr := dst.Write(buf[:n]); werr != nil && !c.cut.Load() {
				p.drop(c)
				return
			}
		}
		if err != nil {
			if !c.cut.Load() || errors.Is(err, net.ErrClosed) {
				p.drop(c)
			}
			// A cut connection's other side stays open: only the scenario's
			// end closes it.
			return
		}
	}
}

// drop closes both sides of c.
func (p *blackholeProxy) drop(c *proxyConn) {
	p.mu.Lock()
	delete(p.conns, c)
	server := c.server
	p.mu.Unlock()
	c.client.Close()
	if server != nil {
		server.Close()
	}
}

// close stops accepting and closes every connection, cut or not.
func (p *blackholeProxy) close() {
	p.mu.Lock()
	p.stopped = true
	conns := make([]*proxyConn, 0, len(p.conns))
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

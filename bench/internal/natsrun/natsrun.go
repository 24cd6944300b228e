// Package natsrun holds the NATS rows' JetStream server: one given by URL, or a
// private nats-server of the run's own, and the binaries' NATS transport on it.
package natsrun

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/acme/outboxpair/bench/internal/binary"
	"github.com/acme/outboxpair/bench/internal/sitting"
)

// streamName is the stream the contract (section 7) fixes for labeling's events.
const streamName = "LABELING_EVENTS"

// Server is the JetStream server the NATS rows run against: one given by URL,
// or ("start") a private nats-server on a free loopback port with a temporary
// store, so that deleting the stream never touches anybody else's.
type Server struct {
	url    string
	nc     *nats.Conn
	js     jetstream.JetStream
	server *exec.Cmd
}

// Open connects to the server flag (-nats) names, a loopback URL, or with
// "start" starts one: bin is the nats-server a "start" runs ("": nats-server
// in PATH, else /usr/sbin/nats-server); syncAlways starts it with the
// JetStream setting sync_interval: always (each message fsynced before its
// ack; nats-server 2.10 or later), in a store and log of its own under tmp.
// It fails unless the server has JetStream.
func Open(ctx context.Context, flag, tmp, bin string, syncAlways bool) (*Server, error) {
	n := &Server{url: flag}
	if flag == "start" {
		addr, err := binary.FreeAddr()
		if err != nil {
			return nil, err
		}
		if bin == "" {
			if bin, err = exec.LookPath("nats-server"); err != nil {
				bin = "/usr/sbin/nats-server"
			}
		}
		host, port, _ := strings.Cut(addr, ":")
		name := "nats-server"
		if syncAlways {
			name = "nats-server-sync-always"
		}
		dir := filepath.Join(tmp, name+"-jetstream")
		args := []string{"-a", host, "-p", port, "-js", "-sd", dir}
		if syncAlways {
			conf := filepath.Join(tmp, name+".conf")
			if err := os.WriteFile(conf, []byte("jetstream {\n  store_dir: "+strconv.Quote(dir)+"\n  sync_interval: always\n}\n"), 0o600); err != nil {
				return nil, err
			}
			args = []string{"-a", host, "-p", port, "-c", conf}
		}
		n.server = exec.Command(bin, args...)
		logf, err := os.Create(filepath.Join(tmp, name+".log"))
		if err != nil {
			return nil, err
		}
		n.server.Stdout, n.server.Stderr = logf, logf
		if err := n.server.Start(); err != nil {
			return nil, fmt.Errorf("-nats start: %s: %w", bin, err)
		}
		n.url = "nats://" + addr
	} else if err := loopbackURL(flag); err != nil {
		return nil, err
	}
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; {
		n.nc, err = nats.Connect(n.url, nats.Timeout(2*time.Second))
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("-nats: connect %s: %w", n.url, err)
	}
	if n.js, err = jetstream.New(n.nc); err != nil {
		n.Close()
		return nil, err
	}
	if _, err := n.js.AccountInfo(ctx); err != nil {
		n.Close()
		return nil, fmt.Errorf("-nats: %s has no JetStream: %w", n.url, err)
	}
	return n, nil
}

func loopbackURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("-nats: %w", err)
	}
	if h := u.Hostname(); h != "localhost" && !strings.HasPrefix(h, "127.") && h != "::1" {
		return fmt.Errorf("-nats: host %q is not a loopback address", h)
	}
	return nil
}

// Close closes the connection and kills a server the run started; a nil
// Server does nothing.
func (n *Server) Close() {
	if n == nil {
		return
	}
	if n.nc != nil {
		n.nc.Close()
	}
	if n.server != nil && n.server.Process != nil {
		_ = n.server.Process.Kill()
		_ = n.server.Wait()
		n.server = nil
	}
}

// deleteStream removes LABELING_EVENTS (and so billing's consumer) before a run.
func (n *Server) deleteStream(ctx context.Context) error {
	err := n.js.DeleteStream(ctx, streamName)
	if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
		return fmt.Errorf("delete stream %s: %w", streamName, err)
	}
	return nil
}

// Transport is the binaries' NATS transport on n, as the contract names its
// variables; each run starts on an empty stream.
func (n *Server) Transport() binary.Transport {
	return binary.Transport{
		Name:  "nats",
		Lab:   []string{"EVENTS_TRANSPORT=nats", "NATS_URL=" + n.url},
		Bil:   []string{"NATS_URL=" + n.url},
		Reset: n.deleteStream,
	}
}

// Probe tells whether the binaries built for s support the NATS transport:
// labeling started with EVENTS_TRANSPORT=nats must create the stream
// (contract section 7) and stay up. It returns the reason when they do not.
func (n *Server) Probe(ctx context.Context, s *sitting.Sitting) (string, error) {
	labURL, bilURL, drop, err := binary.NewDBs(ctx, s, sitting.SchemaLabeling)
	if err != nil {
		return "", err
	}
	defer drop()
	if err := n.deleteStream(ctx); err != nil {
		return "", err
	}
	p, err := binary.StartPair(ctx, s, labURL, bilURL, n.Transport())
	if err != nil {
		return fmt.Sprintf("the binaries did not start with EVENTS_TRANSPORT=nats: %v", err), nil
	}
	defer p.Stop()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		if _, err := n.js.Stream(ctx, streamName); err == nil {
			return "", nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Sprintf("labeling started with EVENTS_TRANSPORT=nats NATS_URL=%s but created no stream %s within 5s: these binaries do not support the NATS transport", n.url, streamName), nil
}

// Package cluster runs the defaults cluster (-pg-defaults): a throwaway
// PostgreSQL cluster of the program's own, initialised by initdb and started
// with nothing but where it listens, so that it runs PostgreSQL's default
// settings (autovacuum on, shared_buffers 128MB, fsync and synchronous_commit
// on), unlike a shared server tuned for tests.
//
// The approach is internal/testsupport/pgtest's (Debian's server binaries, the
// postgres user when run as root, a free loopback port, trust authentication on
// loopback only), not its code: pgtest turns fsync off, lives as long as its
// test binary (a watchdog stops it), and, being test support, brings
// testing and testcontainers' Docker client with it.
package cluster

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/acme/outboxpair/bench/internal/report"
)

// pgBinDir is where the server binaries are looked for: $E2E_PG_BIN (as the
// tests read it), else Debian's place for PostgreSQL 15.
func pgBinDir() (string, error) {
	dir := os.Getenv("E2E_PG_BIN")
	if dir == "" {
		dir = "/usr/lib/postgresql/15/bin"
	}
	for _, b := range []string{"initdb", "postgres"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("-pg-defaults: no %s in %s (Debian: apt-get install postgresql-15, or set E2E_PG_BIN to the directory of initdb and postgres): %w", b, dir, err)
		}
	}
	return dir, nil
}

// Cluster is a running defaults cluster.
type Cluster struct {
	URL  string // its postgres database, as the postgres superuser
	dir  string // data and log, removed by stop
	cmd  *exec.Cmd
	done chan struct{}
}

// Start initialises a cluster in a fresh directory and starts it on a free
// loopback port, returning once it accepts connections. initdb's flags choose
// only the superuser's name, trust authentication, UTF8 and the C locale (how
// the tests' clusters are made); the server gets only its port and address.
// The postmaster dies with this program (Pdeathsig) if Stop never runs.
func Start(ctx context.Context) (*Cluster, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "outboxpair-bench-pg-")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*Cluster, error) {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			return fail(fmt.Errorf("-pg-defaults: running as root, the cluster runs as the postgres user, which Debian's postgresql package creates: %w", err))
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			return fail(err)
		}
	}
	data := filepath.Join(dir, "data")
	command := func(name string, args ...string) *exec.Cmd {
		cmd := exec.Command(filepath.Join(bin, name), args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
		// Its own process group, so that Ctrl-C reaches this program first,
		// which then stops the cluster after dropping its databases.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
		return cmd
	}
	report.Logf("-pg-defaults: initdb in %s", dir)
	if out, err := command("initdb", "-D", data, "-U", "postgres", "-A", "trust",
		"--encoding=UTF8", "--locale=C").CombinedOutput(); err != nil {
		return fail(fmt.Errorf("-pg-defaults: initdb in %s: %w: %s", dir, err, out))
	}
	for try := 0; ; try++ {
		port, err := freePort()
		if err != nil {
			return fail(err)
		}
		logPath := filepath.Join(dir, "postgres.log")
		logFile, err := os.Create(logPath)
		if err != nil {
			return fail(err)
		}
		cmd := command("postgres", "-D", data, "-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1", "-c", "unix_socket_directories=")
		cmd.Stdout, cmd.Stderr = logFile, logFile
		if err := cmd.Start(); err != nil {
			logFile.Close()
			return fail(err)
		}
		c := &Cluster{
			URL: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port),
			dir: dir, cmd: cmd, done: make(chan struct{}),
		}
		go func() { _ = cmd.Wait(); logFile.Close(); close(c.done) }()
		err = c.waitReady(ctx)
		if err == nil {
			report.Logf("-pg-defaults: PostgreSQL cluster with initdb's defaults at 127.0.0.1:%d", port)
			return c, nil
		}
		_ = cmd.Process.Kill()
		<-c.done
		if log := report.Tail(logPath); try < 2 && strings.Contains(log, "could not bind") {
			continue
		} else {
			return fail(fmt.Errorf("-pg-defaults: postgres in %s: %w\n%s", dir, err, log))
		}
	}
}

func (c *Cluster) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	for {
		select {
		case <-c.done:
			return errors.New("postgres exited")
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, c.URL)
		if err == nil {
			err = conn.Ping(cctx)
			conn.Close(cctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not accepting connections within 1m: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Stop shuts the cluster down fast (SIGINT: abort the sessions, no
// checkpoint wait), kills it after 30s, and removes its directory.
func (c *Cluster) Stop() {
	_ = c.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	_ = os.RemoveAll(c.dir)
}

// freePort picks a loopback port below the ephemeral range, so that no
// outgoing connection takes it between the check and the postmaster's bind.
func freePort() (int, error) {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const floor = 10000
	if low <= floor+1000 {
		return 0, fmt.Errorf("-pg-defaults: no room below the ephemeral ports (%d) for the cluster's port", low)
	}
	for range 100 {
		port := floor + rand.IntN(low-floor)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			_ = l.Close()
			return port, nil
		}
	}
	return 0, errors.New("-pg-defaults: no free loopback port below the ephemeral range")
}

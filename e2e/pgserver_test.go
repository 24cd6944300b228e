package e2e

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// pgServer is a PostgreSQL cluster of the scenario's own, run from the installed
// server binaries on a free loopback port with its data in a temporary
// directory, so the scenario can crash it: the shared test server (and every
// other package's databases on it) is never touched. Unlike the NATS servers it
// is not started through proctest: the postmaster puts every child in a session
// of its own, so a group kill would miss them, and as root it must run as the
// postgres user.
type pgServer struct {
	t       *testing.T
	bin     string
	dir     string // owned by the server's user; the data directory is dir/data
	port    int
	cred    *syscall.Credential // nil: the test's own user
	life    *pgLife
	starts  int
	crashes int
}

// pgLife is one start of the postmaster.
type pgLife struct {
	cmd    *exec.Cmd
	output *proctest.Buffer
	done   chan struct{}
}

// pgBinDir is pgtest.BinDir, saying what to install without them: the suite
// never skips a scenario for want of a binary.
func pgBinDir() (string, error) {
	dir, err := pgtest.BinDir()
	if err != nil {
		return "", fmt.Errorf("the database crash and partition scenarios run a PostgreSQL cluster of their own: %w "+
			"(install the server: apt-get install postgresql, or set %s to the directory that holds initdb and postgres)", err, pgtest.EnvPGBin)
	}
	return dir, nil
}

// startPGServer initialises a cluster and starts it; it is stopped and its
// directory removed when t ends.
func startPGServer(t *testing.T) *pgServer {
	t.Helper()
	bin, err := pgBinDir()
	require.NoError(t, err)
	s := &pgServer{t: t, bin: bin}
	// Not t.TempDir(): its parents are private to root, and the postgres user
	// must reach the data directory.
	s.dir, err = os.MkdirTemp("", "e2e-pg-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(s.dir) })
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root.
		u, err := user.Lookup("postgres")
		require.NoError(t, err, "running as root, the cluster runs as the postgres user, which the postgresql package creates")
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		require.NoError(t, os.Chown(s.dir, int(uid), int(gid)))
		for dir := filepath.Dir(s.dir); dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
			fi, err := os.Stat(dir)
			require.NoError(t, err)
			require.NotZero(t, fi.Mode().Perm()&0o001, "the postgres user cannot reach %s (mode %s): "+
				"point TMPDIR at a directory every user may enter, such as /tmp", dir, fi.Mode().Perm())
		}
	}
	// --no-sync only skips flushing initdb's own files; the server runs with
	// fsync on (its default), so a crash loses nothing that was committed.
	out, err := s.command(filepath.Join(bin, "initdb"), "-D", s.dataDir(), "-U", "postgres", "-A", "trust",
		"--no-sync", "--encoding=UTF8", "--locale=C").CombinedOutput()
	require.NoError(t, err, "initdb: %s", out)

	// Stopped after everything registered later (the services, the pools on
	// it), which cleanups run before this one.
	t.Cleanup(s.stop)
	for try := 0; ; try++ {
		s.port = freePort(t)
		err := s.start()
		if err == nil {
			break
		}
		if s.life == nil {
			t.Fatalf("postgres: %v", err)
		}
		if try < 2 && strings.Contains(s.life.output.String(), "could not bind") {
			continue
		}
		t.Fatalf("postgres: %v\n%s", err, s.life.output.Tail(proctest.TailLines))
	}
	return s
}

func (s *pgServer) dataDir() string { return filepath.Join(s.dir, "data") }

// command runs name as the server's user, in its directory, with no inherited
// environment (the locale is given to initdb explicitly).
func (s *pgServer) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Dir = s.dir
	cmd.Env = []string{"PATH=" + s.bin + ":/usr/bin:/bin"}
	// Its own process group (so a signal to the test's group misses it) and
	// killed with the test binary should that die first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: s.cred}
	return cmd
}

// start runs the postmaster on s.port and waits until it accepts connections
// (after a crash: until its recovery is done).
func (s *pgServer) start() error {
	s.starts++
	cmd := s.command(filepath.Join(s.bin, "postgres"), "-D", s.dataDir(),
		"-p", strconv.Itoa(s.port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=", // TCP only: no socket in a shared directory
		"-c", "shared_buffers=16MB",
		// Connections a partition strands stay open until the scenario ends
		// (see blackholeProxy): room for them and for the new ones.
		"-c", "max_connections=300",
		"-c", "fsync=on", "-c", "synchronous_commit=on", "-c", "full_page_writes=on",
		"-c", "log_min_messages=warning", "-c", "log_connections=off")
	life := &pgLife{cmd: cmd, output: &proctest.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = life.output, life.output
	if err := cmd.Start(); err != nil {
		return err
	}
	s.life = life
	go func() { _ = cmd.Wait(); close(life.done) }()
	s.t.Logf("e2e: start #%d of postgres on 127.0.0.1:%d (pid %d, data %s)", s.starts, s.port, cmd.Process.Pid, s.dataDir())

	ctx := context.Background()
	deadline := time.Now().Add(readyTimeout)
	for {
		select {
		case <-life.done:
			return fmt.Errorf("postgres exited: %s", cmd.ProcessState)
		default:
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		conn, err := pgx.Connect(cctx, s.adminURL())
		if err == nil {
			err = conn.Ping(cctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not accepting connections within %s: %w", readyTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// addr is the server's host:port.
func (s *pgServer) addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// adminURL is the URL of the cluster's maintenance database.
func (s *pgServer) adminURL() string {
	return "postgres://postgres@" + s.addr() + "/postgres?sslmode=disable"
}

// newDB creates an empty database on the cluster, which the service that uses
// it migrates at its start, and opens the checker's pool on it (closed when t
// ends). The pool reconnects by itself after a crash.
func (s *pgServer) newDB(t *testing.T, name string) *pgtest.DB {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.adminURL())
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	u, err := url.Parse(s.adminURL())
	require.NoError(t, err)
	u.Path = "/" + name
	pool, err := postgres.Open(ctx, u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return &pgtest.DB{Name: name, URL: u.String(), Pool: pool}
}

// crash SIGKILLs every process of the cluster at once: the postmaster is
// frozen first (SIGSTOP, so it forks no child while they are gathered), then its
// children and itself are killed. It returns once all of them are gone and
// reports how many processes it killed; the data directory is left as the crash
// left it.
func (s *pgServer) crash(t *testing.T) int {
	t.Helper()
	pm := s.postmasterPID(t)
	require.NoError(t, syscall.Kill(pm, syscall.SIGSTOP))
	children := childPIDs(pm)
	for _, pid := range children {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	require.NoError(t, syscall.Kill(pm, syscall.SIGKILL))
	select {
	case <-s.life.done:
	case <-time.After(deathTimeout):
		t.Fatalf("postgres (pid %d) still running %s after SIGKILL", pm, deathTimeout)
	}
	waitFor(t, deathTimeout, func() bool {
		for _, pid := range children {
			if alive(pid) {
				return false
			}
		}
		return true
	}, "every PostgreSQL backend is dead")
	s.crashes++
	killed := 1 + len(children)
	tally.add(func(c *counts) { c.dbCrashes++; c.dbProcsKilled += killed })
	return killed
}

// restart starts the cluster again on its data directory and port, after a
// crash: PostgreSQL replays its WAL before it accepts connections.
func (s *pgServer) restart(t *testing.T) {
	t.Helper()
	select {
	case <-s.life.done:
	default:
		t.Fatal("postgres: restart of a running cluster")
	}
	if err := s.start(); err != nil {
		t.Fatalf("postgres: restart: %v\n%s", err, s.life.output.Tail(proctest.TailLines))
	}
	// The server's own word that it found a crash, not a clean shutdown.
	require.Contains(t, s.life.output.String(), "automatic recovery in progress",
		"postgres replayed its WAL after the crash:\n%s", s.life.output.Tail(proctest.TailLines))
}

// postmasterPID reads postmaster.pid, which must name the process this test
// started: the cluster's own record of its postmaster, not a guess.
func (s *pgServer) postmasterPID(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(s.dataDir(), "postmaster.pid"))
	require.NoError(t, err)
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	require.NoError(t, err, "postmaster.pid: %q", first)
	require.Equal(t, s.life.cmd.Process.Pid, pid, "postmaster.pid names the postmaster this test started")
	return pid
}

// stop ends the cluster at the end of the test: an immediate shutdown
// (SIGQUIT), which also removes its shared memory, then SIGKILL to whatever is
// left. If the test failed, the server's last lines of output are logged.
func (s *pgServer) stop() {
	if s.life == nil {
		return
	}
	select {
	case <-s.life.done:
	default:
		pm := s.life.cmd.Process.Pid
		children := childPIDs(pm)
		_ = syscall.Kill(pm, syscall.SIGQUIT)
		select {
		case <-s.life.done:
		case <-time.After(10 * time.Second):
			for _, pid := range append(children, pm) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			<-s.life.done
		}
	}
	if s.t.Failed() {
		s.t.Logf("--- postgres on %s (%d starts, %d crashes): last %d lines of output ---\n%s",
			s.addr(), s.starts, s.crashes, proctest.TailLines, s.life.output.Tail(proctest.TailLines))
	}
}

// childPIDs lists the processes whose parent is ppid, from /proc.
func childPIDs(ppid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if parent, _, err := procStat(pid); err == nil && parent == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// alive reports whether pid is a process that still runs (a zombie is dead:
// it holds no socket and no memory).
func alive(pid int) bool {
	_, state, err := procStat(pid)
	return err == nil && state != "Z" && state != "X"
}

// procStat reads a process's parent pid and state from /proc/pid/stat.
func procStat(pid int) (ppid int, state string, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, "", err
	}
	// pid (comm) state ppid ...; comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(b), ')')
	if i < 0 {
		return 0, "", errors.New("malformed stat")
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 2 {
		return 0, "", errors.New("malformed stat")
	}
	ppid, err = strconv.Atoi(fields[1])
	return ppid, fields[0], err
}

// freePort returns a loopback port that was free a moment ago, below the
// kernel's range of ephemeral ports: while the crashed cluster is down its port
// has no listener, and an outgoing connection given that port as its own would
// keep the restart from binding it.
func freePort(t *testing.T) int {
	t.Helper()
	port, err := pgtest.FreePort()
	require.NoError(t, err)
	return port
}

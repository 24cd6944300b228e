package pgtest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	osexec "os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvPGBin names the directory of initdb and postgres when they are not in
// Debian's place (/usr/lib/postgresql/<newest version>/bin); e2e reads the same.
const EnvPGBin = "E2E_PG_BIN"

// errNoBinaries says the machine has no PostgreSQL server binaries.
var errNoBinaries = errors.New("no initdb and postgres under /usr/lib/postgresql/*/bin and " + EnvPGBin + " unset")

// pgLibGlob is where Debian installs the server binaries; a variable so a test
// can stand for a machine without them.
var pgLibGlob = "/usr/lib/postgresql/*/bin"

// BinDir finds initdb and postgres: $E2E_PG_BIN, else the newest version
// under /usr/lib/postgresql (the e2e suite's own clusters use it too).
func BinDir() (string, error) {
	if dir := os.Getenv(EnvPGBin); dir != "" {
		for _, b := range []string{"initdb", "postgres"} {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				return "", fmt.Errorf("%s=%s: no %s there: %w", EnvPGBin, dir, b, err)
			}
		}
		return dir, nil
	}
	dirs, _ := filepath.Glob(pgLibGlob)
	version := func(d string) float64 {
		v, _ := strconv.ParseFloat(filepath.Base(filepath.Dir(d)), 64)
		return v
	}
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, dir := range dirs {
		_, errInit := os.Stat(filepath.Join(dir, "initdb"))
		_, errServer := os.Stat(filepath.Join(dir, "postgres"))
		if errInit == nil && errServer == nil {
			return dir, nil
		}
	}
	return "", errNoBinaries
}

// startCluster initialises a throwaway cluster in a temporary directory and
// starts it on a free loopback port with trust authentication, returning the
// URL of its postgres database. It runs for the rest of the test binary: a
// watchdog process kills the postmaster and removes the directory once the
// binary is gone, however it ended (exit, panic, SIGKILL by go test's
// -timeout), since a package without TestMain has no hook that runs at exit.
func startCluster(bin string) (string, error) {
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return "", err
	}
	fail := func(err error) (string, error) {
		_ = os.RemoveAll(dir)
		return "", err
	}
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			return fail(fmt.Errorf("running as root, the cluster runs as the postgres user, which the postgresql package creates: %w", err))
		}
		uid, _ := strconv.ParseUint(u.Uid, 10, 32)
		gid, _ := strconv.ParseUint(u.Gid, 10, 32)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, int(uid), int(gid)); err != nil {
			return fail(err)
		}
	}
	data := filepath.Join(dir, "data")
	command := func(name string, args ...string) *osexec.Cmd {
		cmd := osexec.Command(filepath.Join(bin, name), args...)
		cmd.Dir = dir
		cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin"}
		// Its own process group, so a Ctrl-C to the test's group does not
		// crash it under a test still running; Pdeathsig is the fast path of
		// the cleanup, the watchdog the sure one.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: cred}
		return cmd
	}
	out, err := command("initdb", "-D", data, "-U", "postgres", "-A", "trust",
		"--no-sync", "--encoding=UTF8", "--locale=C").CombinedOutput()
	if err != nil {
		return fail(fmt.Errorf("initdb in %s: %w: %s", dir, err, out))
	}
	for try := 0; ; try++ {
		port, err := FreePort()
		if err != nil {
			return fail(err)
		}
		var log strings.Builder
		// fsync off: the cluster is thrown away with the run, so durability
		// buys nothing and costs the tests' many CREATE DATABASE seconds.
		cmd := command("postgres", "-D", data, "-p", strconv.Itoa(port),
			"-c", "listen_addresses=127.0.0.1",
			"-c", "unix_socket_directories=",
			"-c", "shared_buffers=32MB", "-c", "max_connections=300",
			"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
			"-c", "log_min_messages=warning")
		cmd.Stdout, cmd.Stderr = &log, &log
		if err := cmd.Start(); err != nil {
			return fail(err)
		}
		if err := watchdog(cmd.Process.Pid, dir); err != nil {
			_ = cmd.Process.Kill()
			return fail(err)
		}
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		u := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
		err = waitReady(u, done)
		if err == nil {
			fmt.Fprintf(os.Stderr, "pgtest: %s unset; started a throwaway PostgreSQL %s cluster at 127.0.0.1:%d (data in %s), stopped when the tests end\n",
				EnvURL, filepath.Base(filepath.Dir(bin)), port, dir)
			return u, nil
		}
		_ = cmd.Process.Kill()
		<-done
		if try < 2 && strings.Contains(log.String(), "could not bind") {
			continue
		}
		return fail(fmt.Errorf("postgres in %s: %w\n%s", dir, err, log.String()))
	}
}

// watchdog starts a shell, outside the test binary's process group, that waits
// for the binary to go, then kills the postmaster (its backends exit on
// postmaster death) and removes the cluster's directory.
func watchdog(pgPid int, dir string) error {
	script := `while kill -0 "$1" 2>/dev/null; do sleep 1; done; kill -KILL "$2" 2>/dev/null; ` +
		`while kill -0 "$2" 2>/dev/null; do sleep 0.2; done; rm -rf "$3"`
	cmd := osexec.Command("/bin/sh", "-c", script, "pgtest-watchdog",
		strconv.Itoa(os.Getpid()), strconv.Itoa(pgPid), dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start the cluster's watchdog: %w", err)
	}
	go func() { _ = cmd.Wait() }()
	return nil
}

func waitReady(u string, done <-chan struct{}) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-done:
			return errors.New("postgres exited")
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, u)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not accepting connections within 2m: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// FreePort picks a loopback port below the ephemeral range, so that no
// outgoing connection takes it between the check and the postmaster's bind
// (nor, for a crashed cluster, while its port has no listener).
func FreePort() (int, error) {
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
		return 0, fmt.Errorf("no room below the ephemeral ports (%d) for the cluster's port", low)
	}
	for range 100 {
		port := floor + rand.IntN(low-floor)
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue
		}
		_ = l.Close()
		return port, nil
	}
	return 0, errors.New("no free loopback port for the cluster")
}

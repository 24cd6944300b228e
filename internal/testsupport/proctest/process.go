package proctest

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

const (
	// ListenTimeout bounds ListenAddr: start-up includes connecting to the
	// database and migrating it, on a machine busy with other tests.
	ListenTimeout = time.Minute
	// killTimeout bounds the wait for a process to die after SIGKILL.
	killTimeout = 15 * time.Second
	// TailLines is how many lines of output are logged when the test failed.
	TailLines = 40
)

// Process is one run of a binary. Its output is captured as it is written;
// Output holds stdout and stderr interleaved in the order they arrived.
type Process struct {
	Stdout, Stderr, Output *Buffer

	name string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
}

// Start runs bin with args and exactly env (nothing is inherited), in its own
// process group. When t ends the whole group is killed and the process reaped;
// if t failed, the last TailLines lines of its output are logged. A failure to
// start fails t.
func Start(t testing.TB, bin string, env map[string]string, args ...string) *Process {
	t.Helper()
	return StartIn(t, "", bin, env, args...)
}

// StartIn is Start in the working directory dir ("" for the test's).
func StartIn(t testing.TB, dir, bin string, env map[string]string, args ...string) *Process {
	t.Helper()
	p := &Process{
		Stdout: &Buffer{}, Stderr: &Buffer{}, Output: &Buffer{},
		name: strings.Join(append([]string{filepath.Base(bin)}, args...), " "),
		cmd:  exec.Command(bin, args...),
		done: make(chan struct{}),
	}
	p.cmd.Dir = dir
	p.cmd.Env = []string{} // not nil: nil would inherit the test's environment
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	sort.Strings(p.cmd.Env)
	p.cmd.Stdout = io.MultiWriter(p.Stdout, p.Output)
	p.cmd.Stderr = io.MultiWriter(p.Stderr, p.Output)
	p.cmd.SysProcAttr = sysProcAttr()
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("proctest: start %s: %v", p.name, err)
	}
	go func() { _ = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.killGroup()
		select {
		case <-p.done:
		case <-time.After(killTimeout):
			t.Errorf("proctest: %s (pid %d) still running %s after SIGKILL", p.name, p.Pid(), killTimeout)
		}
		if t.Failed() {
			t.Logf("--- %s (pid %d, %s): last %d lines of output ---\n%s",
				p.name, p.Pid(), p.exitState(), TailLines, p.Output.Tail(TailLines))
		}
	})
	return p
}

// Pid is the process id, also its process group id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the process has exited; Wait then returns at once.
func (p *Process) Done() <-chan struct{} { return p.done }

// Wait returns the exit state, failing t when the process is still running
// after timeout.
func (p *Process) Wait(t testing.TB, timeout time.Duration) *os.ProcessState {
	t.Helper()
	if p.exited() { // decided before the timer: Wait(t, 0) on an exited process never fails
		return p.cmd.ProcessState
	}
	select {
	case <-p.done:
		return p.cmd.ProcessState
	case <-time.After(timeout):
		t.Fatalf("proctest: %s (pid %d) still running after %s", p.name, p.Pid(), timeout)
		return nil
	}
}

// Signal sends sig to the process (not its group), failing t when it cannot.
func (p *Process) Signal(t testing.TB, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatalf("proctest: signal %s to %s: %v", sig, p.name, err)
	}
}

// Kill sends SIGKILL to the process group and returns the exit state once the
// process is reaped; it fails t if that takes longer than a few seconds.
func (p *Process) Kill(t testing.TB) *os.ProcessState {
	t.Helper()
	p.killGroup()
	return p.Wait(t, killTimeout)
}

func (p *Process) killGroup() {
	// The group outlives a leader that has exited but not been reaped, and while
	// the group has members its id is not reused; so this reaches children even
	// when the process itself is gone.
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
}

func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *Process) exitState() string {
	if p.exited() {
		return p.cmd.ProcessState.String()
	}
	return "running"
}

// LogLines decodes stdout written so far, one JSON object per line, failing t on
// any line that is not one.
func (p *Process) LogLines(t testing.TB) []map[string]any {
	t.Helper()
	return p.decode(t, p.Stdout.String())
}

func (p *Process) decode(t testing.TB, out string) []map[string]any {
	t.Helper()
	var lines []map[string]any
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var line map[string]any
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("proctest: %s: stdout line %q is not a JSON object: %v", p.name, sc.Text(), err)
		}
		lines = append(lines, line)
	}
	if err := sc.Err(); err != nil {
		t.Fatalf("proctest: %s: reading stdout: %v", p.name, err)
	}
	return lines
}

// ListenAddr waits for the {"msg":"http listening","addr":...} log line and
// returns its addr. It fails t when the process exits first, when a stdout line
// is not JSON, or after ListenTimeout.
func (p *Process) ListenAddr(t testing.TB) string {
	t.Helper()
	deadline := time.After(ListenTimeout)
	for {
		exited := p.exited() // before reading: after an exit the output is complete
		out := p.Stdout.String()
		if !exited {
			out = out[:strings.LastIndexByte(out, '\n')+1] // a line being written is not JSON yet
		}
		for _, line := range p.decode(t, out) {
			if addr, ok := line["addr"].(string); ok && line["msg"] == "http listening" {
				return addr
			}
		}
		if exited {
			t.Fatalf("proctest: %s exited before listening: %s\nstderr:\n%s", p.name, p.cmd.ProcessState, p.Stderr.Tail(TailLines))
		}
		select {
		case <-p.done:
		case <-deadline:
			t.Fatalf("proctest: %s not listening after %s", p.name, ListenTimeout)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

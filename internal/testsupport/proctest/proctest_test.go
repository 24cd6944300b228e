package proctest_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

func TestMain(m *testing.M) { os.Exit(proctest.Run(m)) }

const helperPkg = "./internal/testsupport/proctest/testdata/helper"

func helper(t *testing.T) string { return proctest.Build(t, helperPkg) }

// fakeT records what proctest reports to its test, so that a failure can be
// checked rather than suffered. Fatalf ends the calling goroutine, as testing's
// does; run gives it one.
type fakeT struct {
	testing.TB
	mu       sync.Mutex
	fatal    string
	failed   bool
	logs     []string
	cleanups []func()
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.mu.Lock()
	f.fatal, f.failed = fmt.Sprintf(format, args...), true
	f.mu.Unlock()
	runtime.Goexit()
}

func (f *fakeT) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failed = true
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

func (f *fakeT) Logf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.logs = append(f.logs, fmt.Sprintf(format, args...))
}

func (f *fakeT) Cleanup(fn func()) { f.cleanups = append(f.cleanups, fn) }

func (f *fakeT) Failed() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.failed
}

// run calls fn with f in a goroutine of its own and returns the Fatalf message
// ("" when fn returned normally).
func (f *fakeT) run(fn func(t testing.TB)) string {
	done := make(chan struct{})
	go func() { defer close(done); fn(f) }()
	<-done
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.fatal
}

// finish runs the cleanups, last registered first, as testing does.
func (f *fakeT) finish() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}

func TestBuild(t *testing.T) {
	t.Parallel()

	t.Run("builds once per package and tags, relative to the module root", func(t *testing.T) {
		t.Parallel()
		plain := helper(t)
		require.Equal(t, plain, helper(t), "a second call reuses the build")
		tagged := proctest.Build(t, helperPkg, "sometag")
		require.NotEqual(t, plain, tagged, "other tags are another build")
		for _, bin := range []string{plain, tagged} {
			info, err := os.Stat(bin)
			require.NoError(t, err)
			require.NotZero(t, info.Mode()&0o111, "%s is executable", bin)
		}
	})

	t.Run("a package that does not build fails the test with go's message", func(t *testing.T) {
		t.Parallel()
		f := &fakeT{}
		msg := f.run(func(t testing.TB) { proctest.Build(t, "./internal/testsupport/proctest/testdata/nosuch") })
		require.Contains(t, msg, "go build")
		require.Contains(t, msg, "nosuch")
	})
}

func TestModuleRoot(t *testing.T) {
	t.Parallel()
	root, err := proctest.ModuleRoot()
	require.NoError(t, err)
	require.FileExists(t, filepath.Join(root, "go.mod"))
	wd, err := os.Getwd()
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, "internal", "testsupport", "proctest"), wd)
}

func TestBuffer(t *testing.T) {
	t.Parallel()

	t.Run("Tail returns the last n lines without the final newline", func(t *testing.T) {
		t.Parallel()
		var b proctest.Buffer
		require.Empty(t, b.Tail(3))
		fmt.Fprint(&b, "a\nb\n")
		require.Equal(t, "a\nb", b.Tail(3), "fewer lines than asked: all of them")
		fmt.Fprint(&b, "c\nd")
		require.Equal(t, "b\nc\nd", b.Tail(3), "an unfinished last line counts")
		require.Equal(t, "a\nb\nc\nd", b.String())
	})

	t.Run("writes and reads may run at once", func(t *testing.T) {
		t.Parallel()
		var b proctest.Buffer
		var wg sync.WaitGroup
		for range 4 {
			wg.Go(func() {
				for range 100 {
					fmt.Fprintln(&b, "x")
					_ = b.Tail(2)
				}
			})
		}
		wg.Wait()
		require.Equal(t, 400, strings.Count(b.String(), "x\n"))
	})
}

func TestProcess(t *testing.T) {
	t.Parallel()

	t.Run("ListenAddr returns the listening line's address and SIGTERM ends the process with 0", func(t *testing.T) {
		t.Parallel()
		p := proctest.Start(t, helper(t), map[string]string{"ONLY": "this"}, "listen")

		conn, err := net.Dial("tcp", p.ListenAddr(t))
		require.NoError(t, err)
		conn.Close()
		require.Equal(t, []any{"ONLY=this"}, p.LogLines(t)[0]["env"], "the environment is exactly the one given")

		p.Signal(t, syscall.SIGTERM)
		require.Equal(t, 0, p.Wait(t, 30*time.Second).ExitCode())
	})

	t.Run("ListenAddr fails when the process exits first, showing its stderr", func(t *testing.T) {
		t.Parallel()
		p := proctest.Start(t, helper(t), nil, "exit")

		msg := (&fakeT{}).run(func(t testing.TB) { p.ListenAddr(t) })

		require.Contains(t, msg, "exited before listening")
		require.Contains(t, msg, "bye")
	})

	t.Run("Wait returns the exit state and the output stays readable", func(t *testing.T) {
		t.Parallel()
		p := proctest.Start(t, helper(t), nil, "exit")

		require.Equal(t, 3, p.Wait(t, 30*time.Second).ExitCode())
		require.Equal(t, "bye\n", p.Stderr.String())
		require.Empty(t, p.Stdout.String())
		require.Equal(t, "bye\n", p.Output.String())
		require.Equal(t, 3, p.Wait(t, 0).ExitCode(), "an exited process never times out")
	})

	t.Run("Wait fails when the process outlives the timeout", func(t *testing.T) {
		t.Parallel()
		p := proctest.Start(t, helper(t), nil, "sleep")

		msg := (&fakeT{}).run(func(t testing.TB) { p.Wait(t, 50*time.Millisecond) })

		require.Contains(t, msg, "still running after 50ms")
	})

	t.Run("LogLines and ListenAddr fail on a stdout line that is not JSON", func(t *testing.T) {
		t.Parallel()
		p := proctest.Start(t, helper(t), nil, "notjson")
		require.Eventually(t, func() bool { return p.Stdout.String() == "not json\n" }, 30*time.Second, 10*time.Millisecond)

		require.Contains(t, (&fakeT{}).run(func(t testing.TB) { p.LogLines(t) }), `"not json" is not a JSON object`)
		require.Contains(t, (&fakeT{}).run(func(t testing.TB) { p.ListenAddr(t) }), `"not json" is not a JSON object`)
	})

	t.Run("Kill ends the process group, children included", func(t *testing.T) {
		t.Parallel()
		p := proctest.Start(t, helper(t), nil, "spawn")
		var child int
		require.Eventually(t, func() bool {
			lines := p.LogLines(t)
			if len(lines) == 0 {
				return false
			}
			child = int(lines[0]["pid"].(float64))
			return true
		}, 30*time.Second, 10*time.Millisecond)

		require.Equal(t, "signal: killed", p.Kill(t).String())
		require.Eventually(t, func() bool { return gone(child) }, 15*time.Second, 10*time.Millisecond,
			"the child %d died with its parent's group", child)
	})

	t.Run("the end of the test kills the process and, when it failed, logs the output's tail", func(t *testing.T) {
		t.Parallel()
		f := &fakeT{}
		p := proctest.Start(f, helper(t), nil, "lines", "100")
		require.Eventually(t, func() bool { return strings.Count(p.Stdout.String(), "\n") == 100 }, 30*time.Second, 10*time.Millisecond)
		f.failed = true

		f.finish()

		select {
		case <-p.Done():
		default:
			t.Fatal("the process survived the test")
		}
		require.Len(t, f.logs, 1)
		log := f.logs[0]
		require.Contains(t, log, "signal: killed")
		require.Contains(t, log, `"line 60"`)
		require.Contains(t, log, `"line 99"`)
		require.NotContains(t, log, `"line 59"`, "only the last %d lines", proctest.TailLines)
	})
}

// gone reports whether pid has exited: no such process, or a zombie waiting
// for whoever inherited it.
func gone(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// The state follows the command name, which is in parentheses.
	rest := string(stat[strings.LastIndexByte(string(stat), ')')+1:])
	return strings.HasPrefix(strings.TrimSpace(rest), "Z")
}

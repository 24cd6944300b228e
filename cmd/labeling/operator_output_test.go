package main

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// Contract section 1: a failure caused by a setting prints one line naming the
// variable, without the dependency-injection chain or internal names; the
// operator commands that succeed say what they did.
func TestOperatorOutputs(t *testing.T) {
	t.Parallel()
	bins := map[string]string{"labeling": binary(t), "billing": proctest.Build(t, "./cmd/billing")}

	for name, bin := range bins {
		t.Run(name+" serve on an unusable SQLite path prints one line naming DATABASE_URL", func(t *testing.T) {
			t.Parallel()
			// A regular file where the path needs a folder: no folder can be made.
			file := filepath.Join(t.TempDir(), "a-file")
			require.NoError(t, os.WriteFile(file, nil, 0o600))
			p := proctest.Start(t, bin, map[string]string{
				"DATABASE_URL": "sqlite:" + filepath.Join(file, "x.db"), "EVENTS_TOKEN": "t",
				"AUTH_DISABLED": "true", "HTTP_ADDR": "127.0.0.1:0", "BILLING_URL": "http://127.0.0.1:1",
			}, "serve")
			require.Equal(t, exitFail, p.Wait(t, time.Minute).ExitCode())
			stderr := p.Stderr.String()
			require.True(t, strings.HasPrefix(stderr, name+": DATABASE_URL: "), stderr)
			require.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
			for _, internal := range []string{"could not build", "github.com/", "fx.", "failed to build", ".go:"} {
				require.NotContains(t, stderr, internal, "no injection chain")
			}
		})

		t.Run(name+" migrate says what it applied, then that nothing was left", func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "x.db")}
			first := proctest.Start(t, bin, env, "migrate")
			require.Equal(t, exitOK, first.Wait(t, time.Minute).ExitCode(), first.Stderr.String())
			msgs := func(p *proctest.Process) (out []string) {
				for _, l := range p.LogLines(t) {
					out = append(out, l["msg"].(string))
				}
				return out
			}
			require.Regexp(t, `^migrations: applied [1-9]\d*, now at version [1-9]\d*$`, msgs(first)[len(msgs(first))-1])
			second := proctest.Start(t, bin, env, "migrate")
			require.Equal(t, exitOK, second.Wait(t, time.Minute).ExitCode(), second.Stderr.String())
			// The second run opens the database (its "database opened" line) and applies nothing.
			got := msgs(second)
			require.Regexp(t, `^migrations: at version [1-9]\d*, nothing to apply$`, got[len(got)-1])
			require.NotContains(t, got, "migration applied")
		})

		t.Run(name+" healthcheck says which server answered", func(t *testing.T) {
			t.Parallel()
			p := proctest.Start(t, bin, map[string]string{
				"DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "x.db"), "EVENTS_TOKEN": "t",
				"AUTH_DISABLED": "true", "HTTP_ADDR": "127.0.0.1:0", "BILLING_URL": "http://127.0.0.1:1",
			}, "serve")
			addr := p.ListenAddr(t)
			var hc *proctest.Process
			require.Eventually(t, func() bool {
				hc = proctest.Start(t, bin, map[string]string{"HTTP_ADDR": addr}, "healthcheck")
				return hc.Wait(t, time.Minute).ExitCode() == exitOK
			}, time.Minute, 100*time.Millisecond)
			require.Equal(t, "ready: the server on "+addr+" answered /readyz with 200\n", hc.Stdout.String())

			// Nothing listens on a port just closed: the failure names HTTP_ADDR.
			l, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			closed := l.Addr().String()
			require.NoError(t, l.Close())
			down := proctest.Start(t, bin, map[string]string{"HTTP_ADDR": closed}, "healthcheck")
			require.Equal(t, exitFail, down.Wait(t, time.Minute).ExitCode())
			require.True(t, strings.HasPrefix(down.Stderr.String(), name+": HTTP_ADDR "+closed+": no server answers /readyz"), down.Stderr.String())
		})
	}

	for _, c := range []struct{ bin, args, note string }{
		{"labeling", "outbox failed", "no failed rows"},
		{"billing", "nats failed", "no failed records"},
	} {
		t.Run(c.bin+" "+c.args+" with nothing failed leaves stdout empty and says so on stderr", func(t *testing.T) {
			t.Parallel()
			env := map[string]string{"DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "x.db")}
			m := proctest.Start(t, bins[c.bin], env, "migrate")
			require.Equal(t, exitOK, m.Wait(t, time.Minute).ExitCode(), m.Stderr.String())
			p := proctest.Start(t, bins[c.bin], env, strings.Fields(c.args)...)
			require.Equal(t, exitOK, p.Wait(t, time.Minute).ExitCode(), p.Stderr.String())
			require.Empty(t, p.Stdout.String(), "stdout is the listing, for scripts")
			require.Equal(t, c.note+"\n", p.Stderr.String())
		})
	}

	t.Run("a usage error of the real binary is two lines whose hint runs", func(t *testing.T) {
		t.Parallel()
		p := proctest.Start(t, bins["labeling"], nil, "outbox", "bogus")
		require.Equal(t, exitUsage, p.Wait(t, time.Minute).ExitCode())
		require.Equal(t, "labeling: unknown outbox subcommand \"bogus\"\nrun \"labeling help outbox\" for the usage\n", p.Stderr.String())
		h := proctest.Start(t, bins["labeling"], nil, "help", "outbox")
		require.Equal(t, exitOK, h.Wait(t, time.Minute).ExitCode())
		require.Contains(t, h.Stdout.String(), "outbox requeue ID...")
		require.NotContains(t, h.Stdout.String(), "apply pending migrations")
	})
}

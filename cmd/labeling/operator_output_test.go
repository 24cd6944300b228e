package main

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
	"github.com/acme/outboxpair/migrations"
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

	// Issue 34: every command that opens a database names it on stderr, one
	// line before its output (DATABASE_URL forgotten, `outbox failed` read
	// the default file and said only "no failed rows"); stdout stays exactly
	// the output a script reads.
	t.Run("each command that opens a database names it on stderr first and leaves stdout as it was", func(t *testing.T) {
		t.Parallel()
		dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
			dbs := map[string]*dbtest.DB{"labeling": dbtest.New(t, d, migrations.Labeling), "billing": dbtest.New(t, d, migrations.Billing)}
			id := uuid.NewString()
			for _, c := range []struct{ bin, args, stdout, note string }{
				{"labeling", "outbox failed", "", "no failed rows\n"},
				{"labeling", "outbox requeue " + id, "requeued 0 of 1 rows\n", ""},
				{"labeling", "outbox requeue --all-failed", "requeued 0 rows\n", ""},
				{"labeling", "outbox delete " + id, "deleted 0 of 1 rows\n", ""},
				{"labeling", "outbox fail " + id, "failed 0 of 1 rows\n", ""},
				{"billing", "outbox failed", "", "no failed rows\n"},
				{"billing", "outbox requeue " + id, "requeued 0 of 1 rows\n", ""},
				{"billing", "outbox requeue --all-failed", "requeued 0 rows\n", ""},
				{"billing", "outbox delete " + id, "deleted 0 of 1 rows\n", ""},
				{"billing", "outbox fail " + id, "failed 0 of 1 rows\n", ""},
				{"billing", "nats failed", "", "no failed records\n"},
				{"billing", "nats replay --all", "replayed 0 of 0 records\n", ""},
			} {
				t.Run(c.bin+" "+strings.ReplaceAll(c.args, id, "ID"), func(t *testing.T) {
					t.Parallel()
					env := map[string]string{"DATABASE_URL": dbs[c.bin].URL}
					if strings.HasPrefix(c.args, "nats replay") {
						env["EVENTS_TOKEN"] = "t" // replay checks signatures (contract section 1)
					}
					p := proctest.Start(t, bins[c.bin], env, strings.Fields(c.args)...)
					require.Equal(t, exitOK, p.Wait(t, time.Minute).ExitCode(), p.Stderr.String())
					require.Equal(t, c.stdout, p.Stdout.String(), "stdout is the output a script reads, unchanged")
					require.Equal(t, databaseLine(t, dbs[c.bin])+c.note, p.Stderr.String())
				})
			}
		})
	})

	t.Run("labeling outbox failed with DATABASE_URL unset names the default file it read", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		m := proctest.StartIn(t, dir, bins["labeling"], nil, "migrate")
		require.Equal(t, exitOK, m.Wait(t, time.Minute).ExitCode(), m.Stderr.String())
		p := proctest.StartIn(t, dir, bins["labeling"], nil, "outbox", "failed")
		require.Equal(t, exitOK, p.Wait(t, time.Minute).ExitCode(), p.Stderr.String())
		require.Empty(t, p.Stdout.String())
		require.Equal(t, "database: sqlite path="+filepath.Join(dir, "data", "labeling.db")+"\nno failed rows\n", p.Stderr.String())
	})

	t.Run("the line never carries the password of DATABASE_URL", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t, migrations.Labeling)
		u, err := url.Parse(db.URL)
		require.NoError(t, err)
		password, set := u.User.Password()
		if !set {
			// A server that trusts the test's user ignores a password.
			password = "never-printed-" + uuid.NewString()
			u.User = url.UserPassword(u.User.Username(), password)
		}
		p := proctest.Start(t, bins["labeling"], map[string]string{"DATABASE_URL": u.String()}, "outbox", "failed")
		require.Equal(t, exitOK, p.Wait(t, time.Minute).ExitCode(), p.Stderr.String())
		require.Equal(t, databaseLine(t, &dbtest.DB{URL: db.URL, Pool: db.Pool})+"no failed rows\n", p.Stderr.String())
		require.NotContains(t, p.Output.String(), password)
	})

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

// databaseLine is the line an operator command prints on stderr before its
// output for db, written out from db's URL: "database: sqlite path=FILE" (an
// absolute path) or "database: postgres host=H port=P database=D".
func databaseLine(t *testing.T, db *dbtest.DB) string {
	t.Helper()
	if file, ok := strings.CutPrefix(db.URL, "sqlite:"); ok {
		return "database: sqlite path=" + file + "\n"
	}
	cfg, err := pgxpool.ParseConfig(db.URL)
	require.NoError(t, err)
	c := cfg.ConnConfig
	return fmt.Sprintf("database: postgres host=%s port=%d database=%s\n", c.Host, c.Port, c.Database)
}

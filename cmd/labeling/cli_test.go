package main

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

// env is a envvar.Lookup over a map.
func env(vars map[string]string) func(string) (string, bool) {
	return func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
}

func runCLI(vars map[string]string, args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, env(vars), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestUsage(t *testing.T) {
	t.Parallel()

	t.Run("bad arguments print the error and a help hint on stderr, two lines, and exit 2", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{
			{"bogus"},
			{"serve", "now"},
			{"migrate", "--force"},
			{"outbox"},
			{"outbox", "list"},
			{"outbox", "failed", "extra"},
			{"outbox", "requeue"},
			{"outbox", "requeue", "not-a-uuid"},
			{"outbox", "requeue", "--all-failed", uuid.NewString()},
			{"outbox", "requeue", "--all"},
			{"outbox", "delete"},
			{"outbox", "delete", "--all-failed"},
			{"--bogus"},
			{"help", "me"},
			{"outbox", "--all-failed"},
		} {
			code, stdout, stderr := runCLI(nil, args...)
			require.Equal(t, exitUsage, code, "%q", args)
			require.Empty(t, stdout)
			require.True(t, strings.HasPrefix(stderr, "labeling: "), stderr)
			lines := strings.Split(strings.TrimSuffix(stderr, "\n"), "\n")
			require.Len(t, lines, 2, "the error and the hint, no usage to scroll it away: %q", stderr)
			require.Regexp(t, `^run "labeling help( outbox| serve| migrate)?" for the usage$`, lines[1])
			if args[0] == "outbox" {
				require.Equal(t, `run "labeling help outbox" for the usage`, lines[1])
			}
			// The hint runs and prints that part of the usage.
			hint := strings.Fields(strings.Trim(strings.TrimPrefix(strings.TrimSuffix(lines[1], " for the usage"), "run "), `"`))
			code, stdout, _ = runCLI(nil, hint[1:]...)
			require.Equal(t, exitOK, code, hint)
			require.Contains(t, stdout, "usage: labeling")
		}
	})

	t.Run("each usage error says what is wrong in its first line", func(t *testing.T) {
		t.Parallel()
		for args, msg := range map[string]string{
			"bogus":                      `unknown command "bogus"`,
			"serve now":                  `serve takes no arguments, got ["now"]`,
			"outbox":                     `outbox needs a subcommand: failed, requeue, delete or fail`,
			"outbox list":                `unknown outbox subcommand "list"`,
			"outbox failed extra":        `outbox failed takes no arguments, got ["extra"]`,
			"outbox requeue":             `outbox requeue needs at least one row id`,
			"outbox requeue --all":       `outbox requeue: flag provided but not defined: -all`,
			"outbox delete --all-failed": `outbox delete: flag provided but not defined: -all-failed`,
			"outbox requeue --all-failed " + uuid.Nil.String():      `outbox requeue --all-failed takes no row ids, got ["` + uuid.Nil.String() + `"]`,
			"outbox requeue " + uuid.Nil.String() + " --all-failed": `outbox requeue: "--all-failed" is not a row id (a UUID)`,
			"outbox requeue --all-failed=false":                     `outbox requeue needs at least one row id`,
		} {
			code, _, stderr := runCLI(nil, strings.Fields(args)...)
			require.Equal(t, exitUsage, code, args)
			require.Equal(t, "labeling: "+msg, strings.SplitN(stderr, "\n", 2)[0], args)
		}
	})

	t.Run("help prints usage on stdout and exits 0", func(t *testing.T) {
		t.Parallel()
		code, stdout, _ := runCLI(nil, "--help")
		require.Equal(t, exitOK, code)
		require.Contains(t, stdout, "outbox requeue --all-failed")
	})

	t.Run("help, -h and --help at any level print the same usage and exit 0", func(t *testing.T) {
		t.Parallel()
		for _, args := range []string{"help", "-h", "-help", "outbox -h", "outbox requeue -h", "migrate --help"} {
			code, stdout, stderr := runCLI(nil, strings.Fields(args)...)
			require.Equal(t, exitOK, code, args)
			require.Equal(t, program.Usage(), stdout, args)
			require.Empty(t, stderr, args)
		}
	})

	t.Run("help names every command of the table", func(t *testing.T) {
		t.Parallel()
		_, stdout, _ := runCLI(nil, "help")
		for _, c := range program.Commands {
			require.Contains(t, stdout, "\n  "+c.Name+" ", c.Name)
		}
	})

	t.Run("help names every variable labeling reads and no other", func(t *testing.T) {
		t.Parallel()
		_, stdout, _ := runCLI(nil, "help")
		_, environment, found := strings.Cut(stdout, "\nconfiguration (environment):\n")
		require.True(t, found, stdout)
		// SUBSCRIBER_<NAME>_URL is a template, SUBSCRIBERS the one name without _.
		named := regexp.MustCompile(`\b[A-Z][A-Z0-9]*(?:_(?:[A-Z0-9]+|<NAME>))+\b|\bSUBSCRIBERS\b`).FindAllString(environment, -1)
		require.ElementsMatch(t, envvar.LabelingService.Names(), slices.Compact(slices.Sorted(slices.Values(named))))
	})

	t.Run("a bad configuration exits 1 with one line naming the variable", func(t *testing.T) {
		t.Parallel()
		for _, tc := range []struct {
			variable, command string
			vars              map[string]string
		}{
			{"DATABASE_URL", "migrate", map[string]string{"EVENTS_TOKEN": "t", "DATABASE_URL": "sqlite:"}},
			{"DATABASE_URL", "outbox failed", map[string]string{"DATABASE_URL": "mysql://nope"}},
			{"DB_LOCK_TIMEOUT", "outbox failed", map[string]string{"DATABASE_URL": "postgres://h/db", "DB_LOCK_TIMEOUT": "2"}},
			{"EVENTS_TOKEN", "serve", map[string]string{"DATABASE_URL": "postgres://h/db"}},
			{"OUTBOX_POLL_INTERVAL", "serve", map[string]string{"DATABASE_URL": "postgres://h/db", "EVENTS_TOKEN": "t", "OUTBOX_POLL_INTERVAL": "often"}},
			{"OUTBOX_CLAIM_SIZE", "serve", map[string]string{"DATABASE_URL": "postgres://h/db", "EVENTS_TOKEN": "t", "OUTBOX_CLAIM_SIZE": "307445735"}},
		} {
			variable, vars := tc.variable, tc.vars
			code, _, stderr := runCLI(vars, strings.Fields(tc.command)...)
			require.Equal(t, exitFail, code, "%s %v", tc.command, vars)
			require.True(t, strings.HasPrefix(stderr, "labeling: "+variable+": "), stderr)
			require.Equal(t, 1, strings.Count(stderr, "\n"))
		}
	})
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.Empty(t)
	vars := map[string]string{"DATABASE_URL": db.URL} // no EVENTS_TOKEN: migrate never delivers

	code, stdout, stderr := runCLI(vars, "migrate")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, `"msg":"migration applied"`)
	code, stdout, stderr = runCLI(vars, "migrate")
	require.Equal(t, exitOK, code, stderr)
	require.NotContains(t, stdout, "migration applied", "the second run finds nothing to do")

	var tables int
	require.NoError(t, db.Pool.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables
		WHERE table_name IN ('labeling_rules', 'outbox_events')`).Scan(&tables))
	require.Equal(t, 2, tables)
}

// outboxFixture holds one row in each state.
type outboxFixture struct {
	vars                       map[string]string
	db                         *dbtest.DB
	failed, pending, processed uuid.UUID
}

func setupOutbox(t *testing.T, d sqldb.Dialect) *outboxFixture {
	t.Helper()
	db := dbtest.New(t, d, migrations.Labeling)
	f := &outboxFixture{
		// No EVENTS_TOKEN: the operator commands never deliver.
		vars: map[string]string{"DATABASE_URL": db.URL},
		db:   db, failed: uuid.New(), pending: uuid.New(), processed: uuid.New(),
	}
	db.Exec(t, `
		INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, processed_at, failed_at, last_error)
		VALUES ($1, 'RuleActivated', '{}', 1000, 1000, 10, NULL, 1709251199007, $4),
		       ($2, 'RuleActivated', '{}', 1000, 1000, 0, NULL, NULL, NULL),
		       ($3, 'RuleDeactivated', '{}', 1000, 1000, 1, 2000, NULL, NULL)`,
		f.failed, f.pending, f.processed, "billing said 400:\n\tbad\\payload")
	return f
}

func (f *outboxFixture) exists(t *testing.T, id uuid.UUID) bool {
	return f.db.Count(t, `SELECT count(*) FROM outbox_events WHERE id = $1`, id) == 1
}

func TestOutboxCommands(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("failed prints each dead-lettered row on one tab-separated line", func(t *testing.T) {
			t.Parallel()
			f := setupOutbox(t, d)

			code, stdout, stderr := runCLI(f.vars, "outbox", "failed")

			require.Equal(t, exitOK, code, stderr)
			require.Equal(t, f.failed.String()+"\tRuleActivated\t10\t2024-02-29T23:59:59.007Z\tbilling said 400:\\n\\tbad\\\\payload\tbilling\n", stdout)
		})

		t.Run("requeue makes the named failed rows pending with attempts reset", func(t *testing.T) {
			t.Parallel()
			f := setupOutbox(t, d)

			code, stdout, stderr := runCLI(f.vars, "outbox", "requeue", f.failed.String())

			require.Equal(t, exitOK, code, stderr)
			require.Equal(t, "requeued 1 of 1 rows\n", stdout)
			var attempts int
			var failedAt *int64
			var availableAt int64
			require.NoError(t, f.db.QueryRow(
				`SELECT attempts, failed_at, available_at FROM outbox_events WHERE id = $1`, f.failed).Scan(&attempts, &failedAt, &availableAt))
			require.Zero(t, attempts)
			require.Nil(t, failedAt)
			code, stdout, _ = runCLI(f.vars, "outbox", "failed")
			require.Equal(t, exitOK, code)
			require.Empty(t, stdout)
		})

		t.Run("requeue --all-failed requeues every failed row", func(t *testing.T) {
			t.Parallel()
			f := setupOutbox(t, d)

			code, stdout, stderr := runCLI(f.vars, "outbox", "requeue", "--all-failed")

			require.Equal(t, exitOK, code, stderr)
			require.Equal(t, "requeued 1 rows\n", stdout)
			code, stdout, _ = runCLI(f.vars, "outbox", "failed")
			require.Equal(t, exitOK, code)
			require.Empty(t, stdout)
		})

		t.Run("delete removes failed and processed rows", func(t *testing.T) {
			t.Parallel()
			f := setupOutbox(t, d)

			code, stdout, stderr := runCLI(f.vars, "outbox", "delete", f.failed.String(), f.processed.String())

			require.Equal(t, exitOK, code, stderr)
			require.Equal(t, "deleted 2 of 2 rows\n", stdout)
			require.False(t, f.exists(t, f.failed))
			require.False(t, f.exists(t, f.processed))
			require.True(t, f.exists(t, f.pending))
		})

		t.Run("delete refuses a pending row and deletes nothing", func(t *testing.T) {
			t.Parallel()
			f := setupOutbox(t, d)

			code, _, stderr := runCLI(f.vars, "outbox", "delete", f.failed.String(), f.pending.String())

			require.Equal(t, exitFail, code)
			// The database it opened, then the one-line failure.
			require.Regexp(t, `^database: `+string(d)+` [^\n]+\nlabeling: [^\n]*pending[^\n]*\n$`, stderr)
			require.True(t, f.exists(t, f.failed))
			require.True(t, f.exists(t, f.pending))
		})
		t.Run("fail dead-letters the named pending rows and leaves the others alone", func(t *testing.T) {
			t.Parallel()
			f := setupOutbox(t, d)
			f.db.Exec(t, `UPDATE outbox_events SET claimed_until = 1, claim_token = $2, claim_lease = 60000 WHERE id = $1`, f.pending, uuid.New())

			code, stdout, stderr := runCLI(f.vars, "outbox", "fail", f.pending.String(), f.failed.String(), f.processed.String(), uuid.NewString())

			require.Equal(t, exitOK, code, stderr)
			require.Equal(t, "failed 1 of 4 rows\n", stdout)
			require.Equal(t, 1, f.db.Count(t, `SELECT count(*) FROM outbox_events
				WHERE id = $1 AND failed_at IS NOT NULL AND claim_token IS NULL AND claimed_until IS NULL`, f.pending), "failed, its claim cleared")
			require.Equal(t, 1, f.db.Count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND failed_at = 1709251199007`, f.failed), "an earlier failure stays as it was")
			require.Equal(t, 1, f.db.Count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND processed_at = 2000 AND failed_at IS NULL`, f.processed))
			code, stdout, _ = runCLI(f.vars, "outbox", "failed")
			require.Equal(t, exitOK, code)
			require.Contains(t, stdout, f.pending.String()+"\tRuleActivated\t0\t")
			require.Contains(t, stdout, "failed now by an operator after 0 attempt(s); last error: none")
		})

		t.Run("fail without a row id is a usage error", func(t *testing.T) {
			t.Parallel()
			f := setupOutbox(t, d)
			code, _, stderr := runCLI(f.vars, "outbox", "fail")
			require.Equal(t, exitUsage, code)
			require.True(t, strings.HasPrefix(stderr, "labeling: outbox fail needs at least one row id\n"), stderr)
		})
	})
}

func TestOperatorCommandsNeverCreateADatabase(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"outbox", "failed"},
		{"outbox", "requeue", uuid.NewString()},
		{"outbox", "requeue", "--all-failed"},
		{"outbox", "delete", uuid.NewString()},
		{"outbox", "fail", uuid.NewString()},
	} {
		t.Run(strings.Join(args, " ")+" on a missing SQLite file exits 1 naming its absolute path and creates nothing", func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), "missing")
			path := filepath.Join(dir, "labeling.db")

			code, stdout, stderr := runCLI(map[string]string{"DATABASE_URL": "sqlite:" + path}, args...)

			require.Equal(t, 1, code, stderr)
			require.Empty(t, stdout)
			require.Contains(t, stderr, "DATABASE_URL")
			require.Contains(t, stderr, path)
			require.NotContains(t, stderr, "database: ", "a database that did not open is not named as opened")
			_, err := os.Stat(dir)
			require.ErrorIs(t, err, os.ErrNotExist, "neither the file nor its folder is created")
		})
	}
}

func TestMigrateNamesItsDatabase(t *testing.T) {
	t.Parallel()

	t.Run("on SQLite it logs the absolute path once and whether it created the file", func(t *testing.T) {
		t.Parallel()
		path := filepath.Join(t.TempDir(), "labeling.db")
		vars := map[string]string{"DATABASE_URL": "sqlite:" + path}

		code, stdout, stderr := runCLI(vars, "migrate")
		require.Equal(t, exitOK, code, stderr)
		require.Equal(t, 1, strings.Count(stdout, `"msg":"database opened"`), stdout)
		require.Contains(t, stdout, `"path":"`+path+`","created":true`)
		code, stdout, stderr = runCLI(vars, "migrate")
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, `"path":"`+path+`","created":false`)
	})

	t.Run("on PostgreSQL it logs host, port and database, never the password", func(t *testing.T) {
		t.Parallel()
		db := pgtest.Empty(t)
		cfg, err := pgxpool.ParseConfig(db.URL)
		require.NoError(t, err)
		c := cfg.ConnConfig

		code, stdout, stderr := runCLI(map[string]string{"DATABASE_URL": db.URL}, "migrate")
		require.Equal(t, exitOK, code, stderr)
		require.Contains(t, stdout, fmt.Sprintf(`"dialect":"postgres","host":%q,"port":%d,"database":%q`, c.Host, c.Port, c.Database))
	})

	t.Run("a missing PostgreSQL database fails with one line naming DATABASE_URL, host, port and database", func(t *testing.T) {
		t.Parallel()
		db := pgtest.Empty(t)
		cfg, err := pgxpool.ParseConfig(db.URL)
		require.NoError(t, err)
		c := cfg.ConnConfig
		u, err := url.Parse(db.URL)
		require.NoError(t, err)
		u.Path = "/no_such_database_" + strings.ReplaceAll(uuid.NewString(), "-", "")
		for _, args := range [][]string{{"migrate"}, {"outbox", "failed"}} {
			code, _, stderr := runCLI(map[string]string{"DATABASE_URL": u.String()}, args...)
			require.Equal(t, 1, code, stderr)
			line := strings.TrimSpace(stderr)
			require.NotContains(t, line, "\n", "one line")
			require.Contains(t, line, "DATABASE_URL")
			require.Contains(t, line, fmt.Sprintf("%s:%d", c.Host, c.Port))
			require.Contains(t, line, strings.TrimPrefix(u.Path, "/"))
			require.NotContains(t, line, "migrations: adopt")
		}
	})
}

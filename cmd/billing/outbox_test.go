package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

// billingOutbox is a billing database with one billing_outbox_events row in
// each state (a billing database has no outbox_events: a command on the
// wrong table fails).
type billingOutbox struct {
	env                        map[string]string
	db                         *dbtest.DB
	failed, pending, processed uuid.UUID
}

func setupBillingOutbox(t *testing.T, d sqldb.Dialect) *billingOutbox {
	t.Helper()
	db := dbtest.New(t, d, migrations.Billing)
	f := &billingOutbox{env: env("DATABASE_URL=" + db.URL), db: db, failed: uuid.New(), pending: uuid.New(), processed: uuid.New()}
	db.Exec(t, `
		INSERT INTO billing_outbox_events (id, event_tag, payload, created_at, available_at, attempts, processed_at, failed_at, last_error)
		VALUES ($1, 'QuotaChanged', '{}', 1000, 1000, 10, NULL, 1709251199007, $4),
		       ($2, 'QuotaChanged', '{}', 1000, 1000, 0, NULL, NULL, NULL),
		       ($3, 'QuotaChanged', '{}', 1000, 1000, 1, 2000, NULL, NULL)`,
		f.failed, f.pending, f.processed, "provider answered 410:\n\tgone")
	return f
}

func (f *billingOutbox) exists(t *testing.T, id uuid.UUID) bool {
	return f.db.Count(t, `SELECT count(*) FROM billing_outbox_events WHERE id = $1`, id) == 1
}

// TestOutboxCommands: `billing outbox …` are labeling's commands (the same
// code, cli.OutboxCommands) on billing_outbox_events, in a process.
func TestOutboxCommands(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("failed lists the dead letter; requeue by id makes it pending, attempts reset", func(t *testing.T) {
			t.Parallel()
			f := setupBillingOutbox(t, d)
			r := runCmd(t, f.env, "outbox", "failed")
			require.Equal(t, 0, r.code, r.stderr)
			require.Equal(t, f.failed.String()+"\tQuotaChanged\t10\t2024-02-29T23:59:59.007Z\tprovider answered 410:\\n\\tgone\tprovider\n", r.stdout)

			r = runCmd(t, f.env, "outbox", "requeue", f.failed.String(), uuid.NewString())
			require.Equal(t, 0, r.code, r.stderr)
			require.Equal(t, "requeued 1 of 2 rows\n", r.stdout)
			var attempts int
			var failedAt *int64
			require.NoError(t, f.db.QueryRow(`SELECT attempts, failed_at FROM billing_outbox_events WHERE id = $1`, f.failed).Scan(&attempts, &failedAt))
			require.Zero(t, attempts)
			require.Nil(t, failedAt)

			r = runCmd(t, f.env, "outbox", "failed")
			require.Equal(t, 0, r.code, r.stderr)
			require.Empty(t, r.stdout)
			// The database it read first (cmd/labeling's TestOperatorOutputs
			// holds the line to the URL), then the note.
			require.Regexp(t, `^database: `+string(d)+` [^\n]+\nno failed rows\n$`, r.stderr)
		})

		t.Run("requeue --all-failed requeues every failed row", func(t *testing.T) {
			t.Parallel()
			f := setupBillingOutbox(t, d)
			r := runCmd(t, f.env, "outbox", "requeue", "--all-failed")
			require.Equal(t, 0, r.code, r.stderr)
			require.Equal(t, "requeued 1 rows\n", r.stdout)
		})

		t.Run("delete removes failed and processed rows and refuses a pending one", func(t *testing.T) {
			t.Parallel()
			f := setupBillingOutbox(t, d)
			r := runCmd(t, f.env, "outbox", "delete", f.failed.String(), f.pending.String())
			require.Equal(t, 1, r.code)
			// The database it opened, then the one-line failure.
			require.Regexp(t, `^database: `+string(d)+` [^\n]+\nbilling: [^\n]*pending[^\n]*\n$`, r.stderr)
			require.True(t, f.exists(t, f.failed))

			r = runCmd(t, f.env, "outbox", "delete", f.failed.String(), f.processed.String())
			require.Equal(t, 0, r.code, r.stderr)
			require.Equal(t, "deleted 2 of 2 rows\n", r.stdout)
			require.False(t, f.exists(t, f.failed))
			require.False(t, f.exists(t, f.processed))
			require.True(t, f.exists(t, f.pending))
		})
	})

	t.Run("a usage error exits 2 naming the command", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"outbox", "requeue"}, {"outbox", "delete", "not-a-uuid"}, {"outbox", "requeue", "--all-failed", uuid.NewString()}} {
			r := runCmd(t, env(), args...)
			require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
			require.True(t, strings.HasPrefix(r.stderr, "billing: outbox "), r.stderr)
		}
	})

	t.Run("on a missing SQLite file each exits 1 naming DATABASE_URL and creates nothing", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "missing")
		for _, args := range [][]string{{"outbox", "failed"}, {"outbox", "requeue", "--all-failed"}, {"outbox", "delete", uuid.NewString()}} {
			r := runCmd(t, env("DATABASE_URL=sqlite:"+filepath.Join(dir, "billing.db")), args...)
			require.Equal(t, 1, r.code, r.stderr)
			require.Contains(t, r.stderr, "DATABASE_URL")
			require.NotContains(t, r.stderr, "database: ", "a database that did not open is not named as opened")
			_, err := os.Stat(dir)
			require.ErrorIs(t, err, os.ErrNotExist)
		}
	})
}

package labeling

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

func TestCreateConcurrently(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		shared := setup(t, d)
		const n = 20

		// statuses sends bodies(i) for i in 0..n-1 at once and returns the statuses.
		statuses := func(t *testing.T, b *testBundle, body func(i int) string) map[int]int {
			var wg sync.WaitGroup
			codes := make([]int, n)
			start := make(chan struct{})
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					codes[i] = b.do(t, http.MethodPost, rulesPath(b.org), body(i)).Code
				}()
			}
			close(start)
			wg.Wait()
			got := map[int]int{}
			for _, c := range codes {
				got[c]++
			}
			return got
		}

		t.Run("one id with one body: one 201, the rest 200, one row", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			id := uuid.NewString()
			body := createJSON(t, id, "invoices", `^INV-\d+$`, "finance")

			got := statuses(t, b, func(int) string { return body })

			require.Equal(t, map[int]int{http.StatusCreated: 1, http.StatusOK: n - 1}, got)
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM labeling_rules WHERE id = $1`, id))
		})

		t.Run("one id with different bodies: one 201, the rest 409, one row", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			id := uuid.NewString()

			got := statuses(t, b, func(i int) string {
				return createJSON(t, id, "invoices", `^INV-\d+$`, "label "+string(rune('a'+i)))
			})

			require.Equal(t, map[int]int{http.StatusCreated: 1, http.StatusConflict: n - 1}, got)
			require.Equal(t, 1, b.count(t, `SELECT count(*) FROM labeling_rules WHERE id = $1`, id))
		})
	})
}

func TestActivateConcurrently(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		const n = 20
		b := setup(t, d)
		id := uuid.NewString()
		b.create(t, b.org, id)

		var wg sync.WaitGroup
		codes := make([]int, n)
		active := make([]bool, n)
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				rec := b.do(t, http.MethodPost, rulePath(b.org, id)+"/activate", "")
				codes[i] = rec.Code
				if rec.Code == http.StatusOK {
					active[i] = decode[RuleJSON](t, rec).Active
				}
			}()
		}
		close(start)
		wg.Wait()

		for i := range n {
			require.Equal(t, http.StatusOK, codes[i])
			require.True(t, active[i], "every answer shows the rule active")
		}
		events := b.events(t)
		require.Len(t, events, 1, "exactly one RuleActivated")
		require.Equal(t, "RuleActivated", events[0].Tag)
		require.Equal(t, int64(1), b.nudges.n.Load(), "one state change, one nudge")
	})
}

// failAppends makes every insert into outbox_events raise, as a failing outbox
// write would, after the rule's UPDATE has run in the same transaction.
func failAppends(t *testing.T, b *testBundle) {
	t.Helper()
	if b.db.Dialect() == sqldb.SQLite {
		b.db.Exec(t, `
			CREATE TRIGGER fail_append BEFORE INSERT ON outbox_events
			BEGIN SELECT RAISE(ABORT, 'injected: outbox insert fails'); END`)
		return
	}
	b.db.Exec(t, `
		CREATE FUNCTION fail_append() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'injected: outbox insert fails'; END $$;
		CREATE TRIGGER fail_append BEFORE INSERT ON outbox_events
		FOR EACH ROW EXECUTE FUNCTION fail_append();`)
}

// allowAppends drops failAppends' trigger.
func allowAppends(t *testing.T, b *testBundle) {
	t.Helper()
	if b.db.Dialect() == sqldb.SQLite {
		b.db.Exec(t, `DROP TRIGGER fail_append`)
		return
	}
	b.db.Exec(t, `DROP TRIGGER fail_append ON outbox_events`)
}

func TestStateChangeIsAtomicWithItsEvent(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("a failed append on activate leaves the rule inactive and no event", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			id := uuid.NewString()
			created := b.create(t, b.org, id)
			failAppends(t, b)

			rec := b.do(t, http.MethodPost, rulePath(b.org, id)+"/activate", "")

			require.Equal(t, http.StatusInternalServerError, rec.Code)
			require.JSONEq(t, `{"error":{"code":"internal","message":"internal error"}}`, rec.Body.String(),
				"the body leaks no internals")
			require.Equal(t, created, decode[RuleJSON](t, b.do(t, http.MethodGet, rulePath(b.org, id), "")))
			require.Zero(t, b.count(t, `SELECT count(*) FROM outbox_events`))
			require.Zero(t, b.nudges.n.Load())

			allowAppends(t, b)
			rec = b.do(t, http.MethodPost, rulePath(b.org, id)+"/activate", "")
			require.Equal(t, http.StatusOK, rec.Code, "a retry after the failure activates")
			require.Len(t, b.events(t), 1)
		})

		t.Run("a failed append on deactivate leaves the rule active and no new event", func(t *testing.T) {
			t.Parallel()
			b := setup(t, d)
			id := uuid.NewString()
			b.create(t, b.org, id)
			activated := b.do(t, http.MethodPost, rulePath(b.org, id)+"/activate", "")
			require.Equal(t, http.StatusOK, activated.Code)
			failAppends(t, b)

			rec := b.do(t, http.MethodPost, rulePath(b.org, id)+"/deactivate", "")

			require.Equal(t, http.StatusInternalServerError, rec.Code)
			require.Equal(t, decode[RuleJSON](t, activated), decode[RuleJSON](t, b.do(t, http.MethodGet, rulePath(b.org, id), "")))
			require.Len(t, b.events(t), 1)
			require.Equal(t, int64(1), b.nudges.n.Load())
		})
	})
}

func TestActivationHistory(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		b := setup(t, d)
		id := uuid.NewString()
		b.create(t, b.org, id)

		for _, step := range []string{"activate", "deactivate", "activate"} {
			rec := b.do(t, http.MethodPost, rulePath(b.org, id)+"/"+step, "")
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
		}

		events := b.events(t)
		require.Len(t, events, 3)
		for i, tag := range []string{"RuleActivated", "RuleDeactivated", "RuleActivated"} {
			require.Equal(t, tag, events[i].Tag)
			require.Equal(t, map[string]string{"orgId": b.org, "ruleId": id}, events[i].Payload)
			if i > 0 {
				require.GreaterOrEqual(t, events[i].CreatedAt, events[i-1].CreatedAt)
			}
		}
	})
}

func TestNudge(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		b := setup(t, d)
		id := uuid.NewString()
		b.create(t, b.org, id)
		require.Zero(t, b.nudges.n.Load(), "a create appends nothing and nudges nothing")

		for _, step := range []struct {
			path   string
			nudges int64
		}{
			{rulePath(b.org, id) + "/activate", 1},
			{rulePath(b.org, id) + "/activate", 1},
			{rulePath(uuid.NewString(), id) + "/deactivate", 1},
			{rulePath(b.org, id) + "/deactivate", 2},
			{rulePath(b.org, id) + "/deactivate", 2},
		} {
			b.do(t, http.MethodPost, step.path, "")
			require.Equal(t, step.nudges, b.nudges.n.Load(), step.path)
		}
	})
}

func TestDatabaseDown(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1: every query fails to connect.
	pool, err := postgres.Open(context.Background(), "postgres://postgres@127.0.0.1:1/labeling?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	e := web.New(slog.New(slog.NewJSONHandler(io.Discard, nil)), pool)
	NewHandler(NewService(postgres.NewDB(pool), &countingNudger{})).Register(e, auth.Disabled())
	b := &testBundle{e: e, org: uuid.NewString()}
	id := uuid.NewString()

	for _, req := range []struct{ method, path, body string }{
		{http.MethodPost, rulesPath(b.org), createJSON(t, id, "n", "p", "l")},
		{http.MethodGet, rulesPath(b.org), ""},
		{http.MethodGet, rulePath(b.org, id), ""},
		{http.MethodPost, rulePath(b.org, id) + "/activate", ""},
		{http.MethodPost, rulePath(b.org, id) + "/deactivate", ""},
		{http.MethodGet, "/readyz", ""},
	} {
		rec := b.do(t, req.method, req.path, req.body)
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, req.path)
		require.JSONEq(t, `{"error":{"code":"unavailable","message":"service unavailable, retry later"}}`, rec.Body.String())
	}
}

// TestSQLiteBusy: on SQLite DB_LOCK_TIMEOUT is the busy timeout. While another
// process holds the file's write lock past it, a write answers 503 (the sender
// retries) without waiting longer, reads still answer from WAL's snapshot, and
// once the lock is gone the write goes through.
func TestSQLiteBusy(t *testing.T) {
	t.Parallel()
	first := dbtest.New(t, sqldb.SQLite, migrations.Labeling)
	db, err := sqlite.Open(t.Context(), first.URL, sqldb.Bounds{LockTimeout: 100 * time.Millisecond, StatementTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	e := web.New(slog.New(slog.NewJSONHandler(io.Discard, nil)), db)
	NewHandler(NewService(db, &countingNudger{})).Register(e, auth.Disabled())
	b := &testBundle{e: e, org: uuid.NewString()}
	existing := uuid.NewString()
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, rulesPath(b.org), createJSON(t, existing, "n", "p", "l")).Code)

	// Another process (its own connection) takes the write lock and keeps it.
	other := dbtest.OpenSQLite(t, first.URL)
	holder, err := other.SQLite.Write.BeginTx(t.Context(), nil) // BEGIN IMMEDIATE
	require.NoError(t, err)
	defer func() { _ = holder.Rollback() }() // already rolled back when the test passes

	start := time.Now()
	rec := b.do(t, http.MethodPost, rulesPath(b.org), createJSON(t, uuid.NewString(), "n", "p", "l"))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
	require.JSONEq(t, `{"error":{"code":"unavailable","message":"service unavailable, retry later"}}`, rec.Body.String())
	require.Less(t, time.Since(start), 3*time.Second, "the write gave up at the busy timeout")
	require.Equal(t, http.StatusOK, b.do(t, http.MethodGet, rulePath(b.org, existing), "").Code, "reads go on")

	require.NoError(t, holder.Rollback())
	require.Equal(t, http.StatusCreated, b.do(t, http.MethodPost, rulesPath(b.org), createJSON(t, uuid.NewString(), "n", "p", "l")).Code)
}

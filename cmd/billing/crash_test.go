package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
)

// TestCrash kills the real process at billing's two failpoints and checks what a
// redelivery finds: the receipt and the change are there together or not at all.
func TestCrash(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) { testCrash(t, d) })
}

func testCrash(t *testing.T, d sqldb.Dialect) {

	const tok = "crash-test-token"
	type bundle struct {
		dbURL string
		org   uuid.UUID
		id    uuid.UUID
		body  string
	}
	setup := func(t *testing.T) *bundle {
		t.Helper()
		org, id := uuid.New(), uuid.Must(uuid.NewV7())
		dbURL := "sqlite:" + filepath.Join(t.TempDir(), "billing.db") // created and migrated by the process
		if d == sqldb.Postgres {
			dbURL = pgtest.Empty(t).URL
		}
		return &bundle{
			dbURL: dbURL, org: org, id: id,
			body: fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":`+occurredNow()+`,"payload":{"orgId":%q,"ruleId":%q}}`, id, org, uuid.New()),
		}
	}
	post := func(t *testing.T, addr, body string, id uuid.UUID) (int, error) {
		t.Helper()
		req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/internal/v1/events", strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Idempotency-Key", id.String())
		req.Header.Set("Content-Type", "application/json")
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	// state reads the receipt and the org's active rules (-99 when no row).
	state := func(t *testing.T, b *bundle) (bool, int64) {
		t.Helper()
		var db *dbtest.DB
		if d == sqldb.SQLite {
			db = dbtest.OpenSQLite(t, b.dbURL)
			defer db.Close()
		} else {
			conn, err := pgx.Connect(context.Background(), b.dbURL)
			require.NoError(t, err)
			defer conn.Close(context.Background())
			var receipt bool
			require.NoError(t, conn.QueryRow(context.Background(),
				`SELECT EXISTS (SELECT 1 FROM billing_receipts WHERE event_id = $1)`, b.id).Scan(&receipt))
			var n int64 = -99
			err = conn.QueryRow(context.Background(), `SELECT active_rules FROM billing_quota WHERE org_id = $1`, b.org).Scan(&n)
			if !errors.Is(err, pgx.ErrNoRows) {
				require.NoError(t, err)
			}
			return receipt, n
		}
		var receipt bool
		require.NoError(t, db.QueryRow(
			`SELECT EXISTS (SELECT 1 FROM billing_receipts WHERE event_id = $1)`, b.id).Scan(&receipt))
		var n int64 = -99
		err := db.QueryRow(`SELECT active_rules FROM billing_quota WHERE org_id = $1`, b.org).Scan(&n)
		if !dbtest.NoRows(err) {
			require.NoError(t, err)
		}
		return receipt, n
	}
	// crashOn starts the failpoint binary armed with spec and delivers the event,
	// which must kill it.
	crashOn := func(t *testing.T, b *bundle, spec string) {
		t.Helper()
		s := startBinary(t, failpointBinary(t), env("DATABASE_URL="+b.dbURL, "EVENTS_TOKEN="+tok, "HTTP_ADDR=127.0.0.1:0", "AUTH_DISABLED=true", "FAILPOINTS="+spec))
		_, err := post(t, s.addr, b.body, b.id)
		require.Error(t, err, "the process must die before it answers")
		state := s.Wait(t, 30*time.Second) // the process dies at the failpoint
		ws, ok := state.Sys().(syscall.WaitStatus)
		require.True(t, ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL, "want death by SIGKILL, got %v", state)
	}
	redeliver := func(t *testing.T, b *bundle) {
		t.Helper()
		s := startServer(t, env("DATABASE_URL="+b.dbURL, "EVENTS_TOKEN="+tok, "HTTP_ADDR=127.0.0.1:0", "AUTH_DISABLED=true"))
		for range 2 {
			code, err := post(t, s.addr, b.body, b.id)
			require.NoError(t, err)
			require.Equal(t, http.StatusNoContent, code)
		}
		require.Equal(t, 0, s.stop(t))
	}

	t.Run("a crash before the commit leaves nothing and a redelivery applies once", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		crashOn(t, b, "billing.events.before-commit=exit")
		receipt, n := state(t, b)
		require.False(t, receipt)
		require.EqualValues(t, -99, n, "no quota row")

		redeliver(t, b)
		receipt, n = state(t, b)
		require.True(t, receipt)
		require.EqualValues(t, 1, n)
	})

	t.Run("a crash after the commit loses only the answer and a redelivery changes nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		crashOn(t, b, "billing.events.after-commit=exit")
		receipt, n := state(t, b)
		require.True(t, receipt)
		require.EqualValues(t, 1, n)

		redeliver(t, b)
		receipt, n = state(t, b)
		require.True(t, receipt)
		require.EqualValues(t, 1, n)
	})

	t.Run("an error before the commit answers 500 and writes nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		s := startBinary(t, failpointBinary(t), env("DATABASE_URL="+b.dbURL, "EVENTS_TOKEN="+tok, "HTTP_ADDR=127.0.0.1:0", "AUTH_DISABLED=true",
			"FAILPOINTS=billing.events.before-commit=error"))
		code, err := post(t, s.addr, b.body, b.id)
		require.NoError(t, err)
		require.Equal(t, http.StatusInternalServerError, code)
		require.Equal(t, 0, s.stop(t))
		receipt, n := state(t, b)
		require.False(t, receipt)
		require.EqualValues(t, -99, n)
	})
}

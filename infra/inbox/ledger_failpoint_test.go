//go:build failpoints

package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/inboxtest"
)

// The crash points of a consumer are the inbox's, not billing's code: the
// ledger names billing's points (contract section 6) and a child process,
// this test binary run again with FAILPOINTS armed, delivers one event to the
// ledger and dies (or fails) where the point says. The parent then checks
// what committed, and that a redelivery applies the event exactly once.

// Environment of the child: the database and the event it delivers.
const (
	childURL   = "LEDGER_CHILD_DATABASE_URL"
	childEvent = "LEDGER_CHILD_EVENT"
)

func TestMain(m *testing.M) {
	if url := os.Getenv(childURL); url != "" {
		os.Exit(child(url, os.Getenv(childEvent)))
	}
	os.Exit(m.Run())
}

// child delivers one RuleActivated event of the org "open" to the ledger on url through
// its HTTP intake and prints the status, unless a failpoint kills it first.
func child(url, event string) int {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := database.Open(ctx, url, sqldb.Bounds{StatementTimeout: 10 * time.Second, LockTimeout: 5 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	defer db.Close()
	logger := slog.New(slog.DiscardHandler)
	in, err := inbox.NewIntake(inbox.New(db, logger, ledgerConsumer("ledger_child")), inboxtest.Token, "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 3
	}
	e := web.New(logger, db)
	e.POST(inboxtest.Path, in.Deliver)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, inboxtest.Request(activation(uuid.MustParse(event), "open")))
	fmt.Printf("status %d\n", rec.Code)
	return 0
}

// runChild runs the child on db with FAILPOINTS=points for event id and
// returns its output and whether SIGKILL ended it.
func runChild(t *testing.T, db *dbtest.DB, points string, id uuid.UUID) (out string, killed bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "FAILPOINTS="+points, childURL+"="+db.URL, childEvent+"="+id.String())
	b, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		if ws, ok := exit.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL {
			return string(b), true
		}
	}
	require.NoError(t, err, "child: %s", b)
	return string(b), false
}

func TestLedgerCrashPoints(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		for i, tc := range []struct {
			name      string
			points    string
			killed    bool
			status    string // the child's answer, when it was not killed
			committed bool   // the receipt and the entry are there after the child
		}{
			{"killed before the commit: neither the receipt nor the entry", ledger.FailpointBeforeCommit + "=exit", true, "", false},
			{"an error before the commit: 500, neither the receipt nor the entry", ledger.FailpointBeforeCommit + "=error", false, "status 500", false},
			{"killed after the commit, before the answer: both, once", ledger.FailpointAfterCommit + "=exit", true, "", true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				t.Parallel()
				env := setupLedger(t, d, fmt.Sprintf("ledger_crash_%s_%d", d, i))
				id := uuid.Must(uuid.NewV7())
				out, killed := runChild(t, env.DB, tc.points, id)
				require.Equal(t, tc.killed, killed, "child output: %s", out)
				if tc.status != "" {
					require.Contains(t, out, tc.status)
				}
				want := 0
				if tc.committed {
					want = 1
				}
				require.Equal(t, want, receipts(t, env, id), "the receipt commits with its effect or not at all")
				require.Equal(t, want, entries(t, env, id))

				// The sender's redelivery applies the event exactly once.
				for range 2 {
					require.Equal(t, http.StatusNoContent, env.Deliver(t, activation(id, "open")).Code)
				}
				require.Equal(t, 1, receipts(t, env, id))
				require.Equal(t, 1, entries(t, env, id))
			})
		}
	})
}

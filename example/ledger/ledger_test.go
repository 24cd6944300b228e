package ledger_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/inboxtest"
)

// activation is the delivery of a RuleActivated event of org.
func activation(id, org uuid.UUID) string {
	return inboxtest.Envelope(id, ledger.EventType, fmt.Sprintf(`{"orgId":%q,"ruleId":%q}`, org, uuid.New()))
}

func TestLedger(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		t.Run("its migrations create its tables and record them in ledger_goose_db_version", func(t *testing.T) {
			t.Parallel()
			db := dbtest.New(t, d, ledger.Migrations)
			require.Positive(t, db.Count(t, `SELECT count(*) FROM ledger_goose_db_version WHERE version_id = 1`))
			for _, table := range []string{"ledger_entries", "ledger_receipts", "ledger_nats_failed", "ledger_nats_failed_size"} {
				require.Zero(t, db.Count(t, `SELECT count(*) FROM `+table+` WHERE false`), table)
			}
		})

		t.Run("each event is one entry, redeliveries none; Count counts them and List gives them newest first", func(t *testing.T) {
			t.Parallel()
			env := inboxtest.New(t, dbtest.New(t, d, ledger.Migrations), ledger.Consumer())
			org := uuid.New()
			ids := []uuid.UUID{uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())}
			for _, id := range append(ids, ids[0]) {
				require.Equal(t, http.StatusNoContent, env.Deliver(t, activation(id, org)).Code)
			}
			ctx := context.Background()
			n, err := ledger.Count(ctx, env.DB.DB)
			require.NoError(t, err)
			require.EqualValues(t, 2, n)
			rows, err := ledger.List(ctx, env.DB.DB, 10)
			require.NoError(t, err)
			require.Len(t, rows, 2)
			require.ElementsMatch(t, ids, []uuid.UUID{rows[0].EventID, rows[1].EventID})
			require.GreaterOrEqual(t, rows[0].CreatedAt, rows[1].CreatedAt)
			require.Equal(t, org, rows[0].OrgID)
		})

		t.Run("a payload without its org is 400 and writes nothing", func(t *testing.T) {
			t.Parallel()
			env := inboxtest.New(t, dbtest.New(t, d, ledger.Migrations), ledger.Consumer())
			rec := env.Deliver(t, inboxtest.Envelope(uuid.Must(uuid.NewV7()), ledger.EventType, fmt.Sprintf(`{"ruleId":%q}`, uuid.New())))
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			require.Zero(t, env.DB.Count(t, `SELECT count(*) FROM ledger_receipts`))
		})

		t.Run("the reads answer over HTTP: the count, and a limit out of range is 400", func(t *testing.T) {
			t.Parallel()
			env := inboxtest.New(t, dbtest.New(t, d, ledger.Migrations), ledger.Consumer())
			require.Equal(t, http.StatusNoContent, env.Deliver(t, activation(uuid.Must(uuid.NewV7()), uuid.New())).Code)
			e := env.Echo // the intake is on it already (inboxtest.Path)
			ledger.RegisterReads(e, env.DB.DB, env.Inbox)
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/entries/count", nil))
			require.Equal(t, http.StatusOK, rec.Code)
			require.JSONEq(t, `{"count":1}`, rec.Body.String())
			rec = httptest.NewRecorder()
			e.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/entries?limit=0", nil))
			require.Equal(t, http.StatusBadRequest, rec.Code)
		})
	})
}

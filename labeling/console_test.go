package labeling

import (
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

// TestConsoleTooOldLinksBillingsQuota: the page of a row billing refused as
// event_too_old links the org's quota on billing's console
// (CONSOLE_BILLING_URL), where the operator checks whether it was applied.
// The pages themselves are infra/console's (console.Outbox), tested there.
func TestConsoleTooOldLinksBillingsQuota(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := dbtest.New(t, d, migrations.Labeling)
		org, id := uuid.New(), uuid.Must(uuid.NewV7())
		now := time.Now().UnixMilli()
		db.Exec(t, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, failed_at, last_error)
			VALUES ($1, 'RuleActivated', $2, $3, $3, 1, $3, $4)`, id.String(), `{"orgId":"`+org.String()+`","ruleId":"`+uuid.NewString()+`"}`, now,
			`permanent: deliver RuleActivated x: billing answered 400 Bad Request: {"error":{"code":"event_too_old"}}`)
		page := func(billingConsole string) string {
			e := web.New(slog.New(slog.NewTextHandler(io.Discard, nil)), db.DB)
			c, err := NewConsole(ConsoleConfig{Transport: "http", BillingConsoleURL: billingConsole}, db.DB, outbox.NewStore(db.DB), nil)
			require.NoError(t, err)
			c.Register(e)
			req := httptest.NewRequest(http.MethodGet, "/console/rows/"+id.String(), nil)
			req.RemoteAddr = "127.0.0.1:40000"
			rec := httptest.NewRecorder()
			e.ServeHTTP(rec, req)
			require.Equal(t, http.StatusOK, rec.Code)
			return rec.Body.String()
		}

		body := page("https://billing.example/console/")
		require.Contains(t, body, "Refused for good")
		require.Contains(t, body, `<a href="https://billing.example/console/?org=`+org.String()+`">The org&#39;s quota on billing&#39;s console</a>`)
		body = page("")
		require.Contains(t, body, "Check the org&#39;s quota on billing", "without CONSOLE_BILLING_URL it says so without a link")
		require.NotContains(t, body, "?org=")
	})
}

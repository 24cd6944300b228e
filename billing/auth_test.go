package billing_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/apitest"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

func (b *bundle) quotaAs(t testing.TB, authorization, org string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/v1/orgs/"+org+"/quota", nil)
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	return apitest.Do(t, b.e, req)
}

func TestQuotaAuthentication(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		b := setup(t, freshDB(t, d))
		org := uuid.New()
		require.Equal(t, http.StatusNoContent, b.deliver(t, newEvent("RuleActivated", org).body()).Code)

		t.Run("a token for the org reads its quota", func(t *testing.T) {
			rec := b.quotaAs(t, "Bearer "+b.iss.For(t, org.String()), org.String())
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.JSONEq(t, `{"orgId":"`+org.String()+`","activeRules":1}`, rec.Body.String())
		})

		t.Run("no token is a 401 with WWW-Authenticate: Bearer", func(t *testing.T) {
			rec := b.quotaAs(t, "", org.String())
			require.Equal(t, http.StatusUnauthorized, rec.Code)
			require.True(t, strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer"))
			require.Equal(t, "unauthorized", errorCode(t, rec))
		})

		t.Run("the events token is not a token for the public API", func(t *testing.T) {
			rec := b.quotaAs(t, "Bearer "+token, org.String())
			require.Equal(t, http.StatusUnauthorized, rec.Code)
			require.Contains(t, rec.Header().Get("WWW-Authenticate"), `error="invalid_token"`)
		})

		t.Run("another org's token is a 404 that does not show the quota", func(t *testing.T) {
			rec := b.quotaAs(t, "Bearer "+b.iss.For(t, uuid.NewString()), org.String())
			require.Equal(t, http.StatusNotFound, rec.Code)
			require.Equal(t, "not_found", errorCode(t, rec))
			require.NotContains(t, rec.Body.String(), org.String())
			never := b.quotaAs(t, "Bearer "+b.iss.For(t, uuid.NewString()), uuid.NewString())
			require.Equal(t, rec.Body.String(), never.Body.String(), "an org with a quota and one never seen answer alike")
		})

		t.Run("event delivery keeps EVENTS_TOKEN and takes no JWT", func(t *testing.T) {
			ev := newEvent("RuleActivated", org)
			jwt := b.deliver(t, ev.body(), func(r *http.Request) { r.Header.Set("Authorization", "Bearer "+b.iss.For(t, org.String())) })
			require.Equal(t, http.StatusUnauthorized, jwt.Code)
			require.Equal(t, http.StatusNoContent, b.deliver(t, ev.body()).Code)
			var n int64
			require.NoError(t, b.db.QueryRow(
				`SELECT active_rules FROM billing_quota WHERE org_id = $1`, org).Scan(&n))
			require.EqualValues(t, 2, n)
		})
	})
}

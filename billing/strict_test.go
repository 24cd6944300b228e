package billing_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/apitest"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// TestRequestsAsStrictAsTheSpec sends every kind of request api/openapi.yaml
// forbids to billing's real handlers and checks that each is answered with the
// one status the spec gives it, in the API's words, changing nothing, and that
// the spec itself refuses it (its validator agrees, where it can tell).
func TestRequestsAsStrictAsTheSpec(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		org, rule := uuid.New(), uuid.New()
		nilID := uuid.Nil.String()
		// envelope is a delivery of a fresh event; the tests swap in one part.
		envelope := func(id, typ, occurredAt, payload string) string {
			return fmt.Sprintf(`{"id":%q,"type":%q,"occurredAt":%s,"payload":%s}`, id, typ, occurredAt, payload)
		}
		payload := fmt.Sprintf(`{"orgId":%q,"ruleId":%q}`, org, rule)
		fresh := func() string { return uuid.Must(uuid.NewV7()).String() }
		good := func() string { return envelope(fresh(), "RuleActivated", "1767225600000", payload) }
		cases := []struct {
			name        string
			path        string // "" is the events endpoint
			body        string
			contentType string // "-" sends none
			status      int
			prose       bool // a rule the spec states in words its validator cannot check
		}{
			{name: "envelope names in another case", status: 400,
				body: fmt.Sprintf(`{"ID":%q,"TYPE":"RuleActivated","OccurredAt":1,"Payload":{"ORGID":%q,"RuleId":%q}}`, fresh(), org, rule)},
			{name: "envelope names in another case around a right payload", status: 400,
				body: fmt.Sprintf(`{"ID":%q,"Type":"RuleActivated","OCCURREDAT":1,"Payload":%s}`, fresh(), payload)},
			{name: "an envelope name in another case beside it", status: 400, prose: true,
				body: fmt.Sprintf(`{"id":%q,"type":"RuleActivated","TYPE":"RuleDeactivated","occurredAt":1,"payload":%s}`, fresh(), payload)},
			{name: "payload names in another case", status: 400,
				body: envelope(fresh(), "RuleActivated", "1", fmt.Sprintf(`{"ORGID":%q,"ruleId":%q}`, org, rule))},
			{name: "a duplicate envelope key", status: 400, prose: true,
				body: fmt.Sprintf(`{"id":%q,"type":"RuleDeactivated","type":"RuleActivated","occurredAt":1,"payload":%s}`, fresh(), payload)},
			{name: "a duplicate payload key", status: 400, prose: true,
				body: envelope(fresh(), "RuleActivated", "1", fmt.Sprintf(`{"orgId":%q,"orgId":%q,"ruleId":%q}`, uuid.New(), org, rule))},
			{name: "a JSON array", body: `[]`, status: 400},
			{name: "a JSON number", body: `1`, status: 400},
			{name: "a type that is an object", body: fmt.Sprintf(`{"id":%q,"type":{},"occurredAt":1,"payload":%s}`, fresh(), payload), status: 400},
			{name: "an occurredAt too large for an integer", body: envelope(fresh(), "RuleActivated", "1e40", payload), status: 400},
			{name: "occurredAt 0", body: envelope(fresh(), "RuleActivated", "0", payload), status: 400},
			{name: "the nil UUID as id", body: envelope(nilID, "RuleActivated", "1", payload), status: 400},
			{name: "the nil UUID as payload orgId", body: envelope(fresh(), "RuleActivated", "1", fmt.Sprintf(`{"orgId":%q,"ruleId":%q}`, nilID, rule)), status: 400},
			{name: "the nil UUID as payload ruleId", body: envelope(fresh(), "RuleActivated", "1", fmt.Sprintf(`{"orgId":%q,"ruleId":%q}`, org, nilID)), status: 400},
			// %q would write Go escapes, not JSON's: these two are spelled out.
			{name: "NUL in type", body: fmt.Sprintf(`{"id":%q,"type":"RuleActivated\u0000","occurredAt":1,"payload":%s}`, fresh(), payload), status: 400},
			{name: "NUL in an extra payload field", prose: true, status: 400,
				body: envelope(fresh(), "RuleActivated", "1", fmt.Sprintf(`{"orgId":%q,"ruleId":%q,"note":"a\u0000"}`, org, rule))},
			{name: "invalid UTF-8 in type", body: fmt.Sprintf(`{"id":%q,"type":"RuleActivated`+"\xff"+`","occurredAt":1,"payload":%s}`, fresh(), payload), status: 400, prose: true},
			{name: "invalid UTF-8 in an extra payload field", prose: true, status: 400,
				body: envelope(fresh(), "RuleActivated", "1", fmt.Sprintf(`{"orgId":%q,"ruleId":%q,"note":"`+"\xc3"+`"}`, org, rule))},
			{name: "a lone surrogate escape in a payload field", prose: true, status: 400,
				body: envelope(fresh(), "RuleActivated", "1", fmt.Sprintf(`{"orgId":%q,"ruleId":%q,"note":"\udc00"}`, org, rule))},
			{name: "text/plain", body: good(), contentType: "text/plain", status: 415},
			{name: "no Content-Type", body: good(), contentType: "-", status: 415},
			{name: "an unknown query parameter on delivery", path: "/internal/v1/events?dryRun=1", body: good(), status: 400, prose: true},
			{name: "an unknown query parameter on the quota", path: "/v1/orgs/" + org.String() + "/quota?at=now", status: 400, prose: true},
			{name: "the nil UUID as the quota's org", path: "/v1/orgs/" + nilID + "/quota", status: 400},
			// What the spec allows is answered as it says.
			{name: "application/json with a charset", body: good(), contentType: "application/json; charset=utf-8", status: 204},
			{name: "an unknown envelope field", body: strings.Replace(good(), `{`, `{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",`, 1), status: 204},
			{name: "the quota of an org never seen", path: "/v1/orgs/" + uuid.NewString() + "/quota", status: 200},
		}
		for _, tc := range cases {
			t.Run(tc.name+" answers "+http.StatusText(tc.status), func(t *testing.T) {
				t.Parallel()
				b := setup(t, freshDB(t, d))
				newReq := func() *http.Request {
					var req *http.Request
					switch {
					case tc.path == "":
						req = eventRequest(tc.body)
					case tc.body == "": // the quota
						req = httptest.NewRequest(http.MethodGet, tc.path, nil)
						req.Header.Set(echo.HeaderAuthorization, "Bearer "+b.iss.ForPath(t, req.URL.Path))
					default: // a delivery with a query
						req = eventRequest(tc.body)
						_, req.URL.RawQuery, _ = strings.Cut(tc.path, "?")
					}
					switch tc.contentType {
					case "":
					case "-":
						req.Header.Del(echo.HeaderContentType)
					default:
						req.Header.Set(echo.HeaderContentType, tc.contentType)
					}
					return req
				}
				specErr := apitest.RequestError(newReq())

				rec := apitest.Do(t, b.e, newReq())

				require.Equal(t, tc.status, rec.Code, rec.Body.String())
				require.NotRegexp(t, apitest.GoWords, rec.Body.String(), "the answer speaks the API's words")
				if tc.status >= 400 {
					require.Equal(t, map[int]string{400: "invalid", 415: "unsupported_media_type"}[tc.status], errorCode(t, rec))
					require.Zero(t, b.count(t, "billing_receipts"), "nothing is applied")
					require.Zero(t, b.count(t, "billing_quota"), "nothing is applied")
					if !tc.prose {
						require.Error(t, specErr, "the spec refuses what the service refuses")
					}
					return
				}
				require.NoError(t, specErr, "the spec allows what the service accepts")
			})
		}
	})
}

package labeling

import (
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

// strictCase is one request the spec forbids (or allows) and its one answer.
type strictCase struct {
	name        string
	method      string
	path        string // under the test's org; "{rule}" is the stored rule's id
	body        string
	contentType string // "-" sends none; "" sends application/json when there is a body
	status      int
	// prose marks a rule the spec states in words that its validator cannot
	// check (a duplicate key, invalid UTF-8, an unknown query parameter): the
	// test then checks only the service's answer.
	prose bool
}

// TestRequestsAsStrictAsTheSpec sends every kind of request api/openapi.yaml
// forbids to labeling's real handlers and checks that each is answered with the
// one status the spec gives it, in the API's words, changing nothing, and that
// the spec itself refuses it (its validator agrees, where it can tell).
func TestRequestsAsStrictAsTheSpec(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		shared := setup(t, d)
		good := func(name string) string {
			return `{"id":"` + uuid.NewString() + `","name":"` + name + `","pattern":"^a$","label":"l"}`
		}
		id := uuid.NewString()
		nilID := uuid.Nil.String()
		post, get := http.MethodPost, http.MethodGet
		cases := []strictCase{
			{name: "every field name in another case", method: post, path: "/rules", status: 400,
				body: `{"ID":"` + id + `","NAME":"n","Pattern":"a","LABEL":"l"}`},
			{name: "one field name in another case", method: post, path: "/rules", status: 400,
				body: `{"id":"` + id + `","Name":"n","pattern":"a","label":"l"}`},
			{name: "a name and its other case both given", method: post, path: "/rules", status: 400,
				body: `{"id":"` + id + `","name":"n","Name":"m","pattern":"a","label":"l"}`},
			{name: "a duplicate key", method: post, path: "/rules", status: 400, prose: true,
				body: `{"id":"` + id + `","name":"n","name":"m","pattern":"a","label":"l"}`},
			{name: "a JSON array", method: post, path: "/rules", body: `[]`, status: 400},
			{name: "a JSON string", method: post, path: "/rules", body: `"rule"`, status: 400},
			{name: "a JSON null", method: post, path: "/rules", body: `null`, status: 400},
			{name: "a name that is a number", method: post, path: "/rules", status: 400,
				body: `{"id":"` + id + `","name":7,"pattern":"a","label":"l"}`},
			{name: "a name that is an object", method: post, path: "/rules", status: 400,
				body: `{"id":"` + id + `","name":{},"pattern":"a","label":"l"}`},
			{name: "invalid UTF-8 in name", method: post, path: "/rules", status: 400, prose: true,
				body: `{"id":"` + id + `","name":"a` + "\xff" + `b","pattern":"a","label":"l"}`},
			{name: "a lone surrogate escape in label", method: post, path: "/rules", status: 400, prose: true,
				body: `{"id":"` + id + `","name":"n","pattern":"a","label":"\ud800"}`},
			{name: "NUL in label", method: post, path: "/rules", status: 400,
				body: `{"id":"` + id + `","name":"n","pattern":"a","label":"a\u0000b"}`},
			{name: "NUL in pattern", method: post, path: "/rules", status: 400,
				body: `{"id":"` + id + `","name":"n","pattern":"a\u0000","label":"l"}`},
			{name: "the nil UUID as id", method: post, path: "/rules", status: 400,
				body: `{"id":"` + nilID + `","name":"n","pattern":"a","label":"l"}`},
			{name: "text/plain", method: post, path: "/rules", body: good("n"), contentType: "text/plain", status: 415},
			{name: "a form", method: post, path: "/rules", body: good("n"), contentType: "application/x-www-form-urlencoded", status: 415},
			{name: "JSON under another type", method: post, path: "/rules", body: good("n"), contentType: "application/json-patch+json", status: 415},
			{name: "no Content-Type", method: post, path: "/rules", body: good("n"), contentType: "-", status: 415},
			{name: "an unknown query parameter on create", method: post, path: "/rules?dryRun=1", body: good("n"), status: 400, prose: true},
			{name: "an unknown query parameter on get", method: get, path: "/rules/{rule}?fields=id", status: 400, prose: true},
			{name: "an unknown query parameter on list", method: get, path: "/rules?LIMIT=5", status: 400, prose: true},
			{name: "an unknown query parameter on activate", method: post, path: "/rules/{rule}/activate?force=1", status: 400, prose: true},
			{name: "the nil UUID as after", method: get, path: "/rules?after=" + nilID, status: 400},
			{name: "the nil UUID as ruleId", method: get, path: "/rules/" + nilID, status: 400},
			{name: "an activate body with a member", method: post, path: "/rules/{rule}/activate", body: `{"active":true}`, status: 400},
			{name: "a deactivate body that is an array", method: post, path: "/rules/{rule}/deactivate", body: `[]`, status: 400},
			{name: "an activate body that is not JSON", method: post, path: "/rules/{rule}/activate", body: `yes`, status: 400},
			{name: "an activate body of another type", method: post, path: "/rules/{rule}/activate", body: `{}`, contentType: "text/plain", status: 415},
			{name: "an activate body with no Content-Type", method: post, path: "/rules/{rule}/activate", body: `{}`, contentType: "-", status: 415},
			// What the spec allows is answered as it says.
			{name: "application/json with a charset", method: post, path: "/rules", body: good("n"), contentType: "application/json; charset=utf-8", status: 201},
			{name: "an activate with {}", method: post, path: "/rules/{rule}/activate", body: `{}`, status: 200},
			{name: "a deactivate with no body", method: post, path: "/rules/{rule}/deactivate", status: 200},
		}
		for _, tc := range cases {
			t.Run(tc.name+" answers "+http.StatusText(tc.status), func(t *testing.T) {
				t.Parallel()
				b := shared.withOrg()
				rule := b.create(t, b.org, uuid.NewString())
				path := "/v1/orgs/" + b.org + strings.ReplaceAll(tc.path, "{rule}", rule.ID)
				newReq := func() *http.Request {
					req := httptest.NewRequest(tc.method, path, strings.NewReader(tc.body))
					switch tc.contentType {
					case "-":
					case "":
						if tc.body != "" {
							req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
						}
					default:
						req.Header.Set(echo.HeaderContentType, tc.contentType)
					}
					req.Header.Set(echo.HeaderAuthorization, "Bearer "+b.iss.ForPath(t, path))
					return req
				}
				specErr := apitest.RequestError(newReq())

				rec := apitest.Do(t, b.e, newReq())

				require.Equal(t, tc.status, rec.Code, rec.Body.String())
				require.NotRegexp(t, apitest.GoWords, rec.Body.String(), "the answer speaks the API's words")
				if tc.status >= 400 {
					code := map[int]string{400: "invalid", 415: "unsupported_media_type"}[tc.status]
					requireError(t, rec, tc.status, code)
					require.Equal(t, 1, b.count(t, `SELECT count(*) FROM labeling_rules WHERE org_id = $1`, b.org), "nothing is created")
					require.Zero(t, b.count(t, `SELECT count(*) FROM labeling_rules WHERE org_id = $1 AND active`, b.org), "nothing is activated")
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

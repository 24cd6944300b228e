package apitest

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/stretchr/testify/require"
)

// failures is a testing.TB that records Errorf calls instead of failing, so a test
// can watch Do fail. Anything else goes to the real test.
type failures struct {
	testing.TB
	mu  sync.Mutex
	got []string
}

func (f *failures) Helper() {}

func (f *failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got = append(f.got, fmt.Sprintf(format, args...))
}

func (f *failures) joined() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.got, "\n")
}

// canned answers every request with one status, content type and body, and keeps
// the request body it read.
type canned struct {
	status int
	ctype  string
	body   string

	mu   sync.Mutex
	read []byte
}

func (c *canned) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	c.read = b
	c.mu.Unlock()
	if c.ctype != "" {
		w.Header().Set("Content-Type", c.ctype)
	}
	w.WriteHeader(c.status)
	_, _ = io.WriteString(w, c.body)
}

const (
	orgID    = "0197a3c2-6a1e-7c3b-9f1d-2b4e5a6c7d8e"
	ruleID   = "0197a3c2-6a1e-7c3b-9f1d-000000000001"
	eventID  = "0197a3c2-6a1e-7c3b-9f1d-0000000000e1"
	jsonType = "application/json"
)

func rule(name string) string {
	return `{"id":"` + ruleID + `","orgId":"` + orgID + `","name":"` + name +
		`","pattern":"^a+$","label":"spam","active":false,` +
		`"createdAt":"2026-01-02T15:04:05.123Z","updatedAt":"2026-01-02T15:04:05.123Z"}`
}

func newRule(name string) string {
	return `{"id":"` + ruleID + `","name":"` + name + `","pattern":"^a+$","label":"spam"}`
}

const errBody = `{"error":{"code":"invalid","message":"bad"}}`

func event(typ string) string {
	return `{"id":"` + eventID + `","type":"` + typ + `","occurredAt":1767366245123,` +
		`"payload":{"orgId":"` + orgID + `","ruleId":"` + ruleID + `"}}`
}

// jsonRequest is a request with a JSON body and, on /v1, a bearer token (of any
// value: Do checks the shape, the handler the token).
func jsonRequest(method, path, body string) *http.Request {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", jsonType)
	if strings.HasPrefix(path, "/v1/") {
		req.Header.Set("Authorization", "Bearer a.b.c")
	}
	return req
}

func eventRequest(body string) *http.Request {
	req := jsonRequest(http.MethodPost, "/internal/v1/events", body)
	req.Header.Set("Authorization", "Bearer dev-token")
	req.Header.Set("Idempotency-Key", eventID)
	return req
}

func TestDo(t *testing.T) {
	t.Parallel()

	rulesPath := "/v1/orgs/" + orgID + "/rules"
	rulePath := rulesPath + "/" + ruleID
	emoji200 := strings.Repeat("😀", 200)

	tests := []struct {
		name    string
		req     func() *http.Request
		answer  *canned
		failure string // "" when Do must pass; else a fragment of the failure
	}{
		{
			name:   "a valid create answered 201 with a rule passes",
			req:    func() *http.Request { return jsonRequest(http.MethodPost, rulesPath, newRule("n")) },
			answer: &canned{status: 201, ctype: jsonType, body: rule("n")},
		},
		{
			name:    "a rule missing a required field fails",
			req:     func() *http.Request { return jsonRequest(http.MethodGet, rulePath, "") },
			answer:  &canned{status: 200, ctype: jsonType, body: strings.Replace(rule("n"), `,"updatedAt":"2026-01-02T15:04:05.123Z"`, "", 1)},
			failure: "updatedAt",
		},
		{
			name:    "a rule with a field the spec does not name fails",
			req:     func() *http.Request { return jsonRequest(http.MethodGet, rulePath, "") },
			answer:  &canned{status: 200, ctype: jsonType, body: strings.Replace(rule("n"), `{`, `{"extra":1,`, 1)},
			failure: "extra",
		},
		{
			name:    "a time that is not UTC fails",
			req:     func() *http.Request { return jsonRequest(http.MethodGet, rulePath, "") },
			answer:  &canned{status: 200, ctype: jsonType, body: strings.ReplaceAll(rule("n"), ".123Z", ".123+02:00")},
			failure: "createdAt",
		},
		{
			name:    "a status the operation does not list fails",
			req:     func() *http.Request { return jsonRequest(http.MethodPost, rulesPath, newRule("n")) },
			answer:  &canned{status: 502, ctype: jsonType, body: errBody},
			failure: "status is not supported",
		},
		{
			name:    "an error status with another body fails",
			req:     func() *http.Request { return jsonRequest(http.MethodGet, rulePath, "") },
			answer:  &canned{status: 404, ctype: jsonType, body: `{"message":"not found"}`},
			failure: "response does not match",
		},
		{
			name:   "a malformed request answered 400 passes",
			req:    func() *http.Request { return jsonRequest(http.MethodPost, rulesPath, `{"id":`) },
			answer: &canned{status: 400, ctype: jsonType, body: errBody},
		},
		{
			name: "an unknown field answered 400 passes",
			req: func() *http.Request {
				return jsonRequest(http.MethodPost, rulesPath, `{"id":"`+ruleID+`","name":"n","pattern":"","label":"l","x":1}`)
			},
			answer: &canned{status: 400, ctype: jsonType, body: errBody},
		},
		{
			name: "an unknown field answered 201 fails",
			req: func() *http.Request {
				return jsonRequest(http.MethodPost, rulesPath, `{"id":"`+ruleID+`","name":"n","pattern":"","label":"l","x":1}`)
			},
			answer:  &canned{status: 201, ctype: jsonType, body: rule("n")},
			failure: "accepted a request that does not match",
		},
		{
			name:    "a bad UUID in the path answered 200 fails",
			req:     func() *http.Request { return jsonRequest(http.MethodGet, rulesPath+"/not-a-uuid", "") },
			answer:  &canned{status: 200, ctype: jsonType, body: rule("n")},
			failure: "accepted a request that does not match",
		},
		{
			name:   "a bad UUID in the path answered 400 passes",
			req:    func() *http.Request { return jsonRequest(http.MethodGet, rulesPath+"/not-a-uuid", "") },
			answer: &canned{status: 400, ctype: jsonType, body: errBody},
		},
		{
			name:   "a 200-character name of emoji passes (lengths count characters)",
			req:    func() *http.Request { return jsonRequest(http.MethodPost, rulesPath, newRule(emoji200)) },
			answer: &canned{status: 201, ctype: jsonType, body: rule(emoji200)},
		},
		{
			name:    "a 201-character name accepted fails",
			req:     func() *http.Request { return jsonRequest(http.MethodPost, rulesPath, newRule(emoji200+"a")) },
			answer:  &canned{status: 201, ctype: jsonType, body: rule("n")},
			failure: "maximum string length is 200",
		},
		{
			name:    "a limit over 500 accepted fails",
			req:     func() *http.Request { return jsonRequest(http.MethodGet, rulesPath+"?limit=501", "") },
			answer:  &canned{status: 200, ctype: jsonType, body: `{"rules":[],"next":null}`},
			failure: "accepted a request that does not match",
		},
		{
			name:   "an empty page with next null passes",
			req:    func() *http.Request { return jsonRequest(http.MethodGet, rulesPath+"?limit=500&after="+ruleID, "") },
			answer: &canned{status: 200, ctype: jsonType, body: `{"rules":[],"next":null}`},
		},
		{
			name:    "a page without next fails",
			req:     func() *http.Request { return jsonRequest(http.MethodGet, rulesPath, "") },
			answer:  &canned{status: 200, ctype: jsonType, body: `{"rules":[]}`},
			failure: "next",
		},
		{
			name:   "a quota passes",
			req:    func() *http.Request { return jsonRequest(http.MethodGet, "/v1/orgs/"+orgID+"/quota", "") },
			answer: &canned{status: 200, ctype: jsonType, body: `{"orgId":"` + orgID + `","activeRules":1}`},
		},
		{
			name:   "an event answered 204 passes",
			req:    func() *http.Request { return eventRequest(event("RuleActivated")) },
			answer: &canned{status: 204},
		},
		{
			name:    "a 204 with a body fails",
			req:     func() *http.Request { return eventRequest(event("RuleDeactivated")) },
			answer:  &canned{status: 204, ctype: jsonType, body: `{}`},
			failure: "no body",
		},
		{
			name: "an event without a bearer token accepted fails",
			req: func() *http.Request {
				r := eventRequest(event("RuleActivated"))
				r.Header.Set("Authorization", "Basic abc")
				return r
			},
			answer:  &canned{status: 204},
			failure: "authorization failed",
		},
		{
			name: "an event without the optional Idempotency-Key accepted passes",
			req: func() *http.Request {
				r := eventRequest(event("RuleActivated"))
				r.Header.Del("Idempotency-Key")
				return r
			},
			answer: &canned{status: 204},
		},
		{
			name:   "an unknown event type answered 501 passes",
			req:    func() *http.Request { return eventRequest(event("RuleRenamed")) },
			answer: &canned{status: 501, ctype: jsonType, body: `{"error":{"code":"not_implemented","message":"unknown type"}}`},
		},
		{
			name:    "an unknown event type answered 204 fails",
			req:     func() *http.Request { return eventRequest(event("RuleRenamed")) },
			answer:  &canned{status: 204},
			failure: "accepted a request that does not match",
		},
		{
			name:   "a route not in the spec answered 404 with the error body passes",
			req:    func() *http.Request { return jsonRequest(http.MethodGet, "/nope", "") },
			answer: &canned{status: 404, ctype: jsonType, body: `{"error":{"code":"not_found","message":"no such route"}}`},
		},
		{
			name:    "a route not in the spec answered 200 fails",
			req:     func() *http.Request { return jsonRequest(http.MethodGet, "/nope", "") },
			answer:  &canned{status: 200, ctype: jsonType, body: `{}`},
			failure: "route is not in api/openapi.yaml",
		},
		{
			name:    "a route not in the spec answered 404 without the error body fails",
			req:     func() *http.Request { return jsonRequest(http.MethodGet, "/nope", "") },
			answer:  &canned{status: 404, ctype: "text/plain", body: "404 page not found"},
			failure: "not the JSON error body",
		},
		{
			name:   "a wrong method answered 400 method_not_allowed passes",
			req:    func() *http.Request { return jsonRequest(http.MethodDelete, rulePath, "") },
			answer: &canned{status: 400, ctype: jsonType, body: `{"error":{"code":"method_not_allowed","message":"Method Not Allowed"}}`},
		},
		{
			name:   "readyz answered 503 with the error body passes",
			req:    func() *http.Request { return httptest.NewRequest(http.MethodGet, "/readyz", nil) },
			answer: &canned{status: 503, ctype: jsonType, body: `{"error":{"code":"unavailable","message":"service unavailable, retry later"}}`},
		},
		{
			name:   "metrics in the Prometheus text format pass",
			req:    func() *http.Request { return httptest.NewRequest(http.MethodGet, "/metrics", nil) },
			answer: &canned{status: 200, ctype: "text/plain; version=0.0.4; charset=utf-8; escaping=underscores", body: "# HELP x y\nx 1\n"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := &failures{TB: t}
			h := tt.answer
			rec := Do(f, h, tt.req())
			require.Equal(t, tt.answer.status, rec.Code)
			if tt.failure == "" {
				require.Empty(t, f.joined())
				return
			}
			require.Contains(t, f.joined(), tt.failure)
		})
	}
}

func TestDoPassesTheBodyToTheHandler(t *testing.T) {
	t.Parallel()
	body := newRule("kept")
	h := &canned{status: 201, ctype: jsonType, body: rule("kept")}
	f := &failures{TB: t}

	Do(f, h, jsonRequest(http.MethodPost, "/v1/orgs/"+orgID+"/rules", body))

	require.Empty(t, f.joined())
	require.Equal(t, body, string(h.read), "the handler must read the whole body Do validated")
}

// TestSpec checks properties of api/openapi.yaml that the validator cannot: the
// document is valid, every error status answers with the error body, and every
// request body is strict.
func TestSpec(t *testing.T) {
	t.Parallel()
	s, err := load()
	require.NoError(t, err)

	errorRef := "#/components/schemas/Error"
	for path, item := range s.doc.Paths.Map() {
		for method, op := range item.Operations() {
			for code, resp := range op.Responses.Map() {
				status, err := strconv.Atoi(code)
				require.NoError(t, err, "%s %s: status %q must be a number", method, path, code)
				if status < 400 {
					continue
				}
				media := resp.Value.Content.Get("application/json")
				require.NotNil(t, media, "%s %s %d: error responses are JSON", method, path, status)
				require.Equal(t, errorRef, media.Schema.Ref, "%s %s %d: error responses use the Error body", method, path, status)
			}
			if op.RequestBody == nil {
				continue
			}
			media := op.RequestBody.Value.Content.Get("application/json")
			require.NotNil(t, media, "%s %s: request bodies are JSON", method, path)
			for _, schema := range objects(media.Schema.Value) {
				require.NotNil(t, schema.AdditionalProperties.Has, "%s %s: request objects set additionalProperties", method, path)
				// The one exception: an event envelope may grow, as its payload
				// does (CONTRACT.md section 4): its unknown members are ignored.
				grows := op.OperationID == "deliverEvent"
				require.Equal(t, grows, *schema.AdditionalProperties.Has,
					"%s %s: request objects reject unknown fields, but for the event envelope, which ignores them", method, path)
			}
		}
	}
}

// objects returns the top-level object schemas of s, looking through oneOf.
func objects(s *openapi3.Schema) []*openapi3.Schema {
	if len(s.OneOf) == 0 {
		return []*openapi3.Schema{s}
	}
	var out []*openapi3.Schema
	for _, ref := range s.OneOf {
		out = append(out, objects(ref.Value)...)
	}
	return out
}

// open are the operations served without credentials.
var open = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

func TestSpecSecurity(t *testing.T) {
	t.Parallel()
	s, err := load()
	require.NoError(t, err)

	scheme := s.doc.Components.SecuritySchemes["bearerJWT"]
	require.NotNil(t, scheme, "components.securitySchemes.bearerJWT")
	require.Equal(t, "http", scheme.Value.Type)
	require.Equal(t, "bearer", scheme.Value.Scheme)
	require.Equal(t, "JWT", scheme.Value.BearerFormat)

	v1 := 0
	for path, item := range s.doc.Paths.Map() {
		for method, op := range item.Operations() {
			name := method + " " + path
			if open[path] {
				require.NotNil(t, op.Security, "%s: say security: [] so it is open on purpose", name)
				require.Empty(t, *op.Security, "%s is open", name)
				continue
			}
			require.NotNil(t, op.Security, "%s has no security", name)
			require.NotEmpty(t, *op.Security, "%s has no security", name)
			require.NotNil(t, op.Responses.Status(http.StatusUnauthorized), "%s lists no 401", name)
			if !strings.HasPrefix(path, "/v1/") {
				continue
			}
			v1++
			for _, req := range *op.Security {
				require.Contains(t, req, "bearerJWT", "%s: every /v1 operation takes the bearer JWT", name)
			}
			require.NotNil(t, op.Responses.Status(http.StatusNotFound), "%s lists no 404 (another org's)", name)
		}
	}
	require.Equal(t, 6, v1, "the /v1 operations of labeling and billing")
}

func TestDoEnforcesTheBearerToken(t *testing.T) {
	t.Parallel()
	h := &canned{status: http.StatusOK, ctype: jsonType, body: rule("n")}
	path := "/v1/orgs/" + orgID + "/rules/" + ruleID

	f := &failures{TB: t}
	Do(f, h, httptest.NewRequest(http.MethodGet, path, nil))
	require.Contains(t, f.joined(), "the server accepted a request that does not match the spec", "a 2xx without a token")

	f = &failures{TB: t}
	req := httptest.NewRequest(http.MethodGet, path, nil)
	req.Header.Set("Authorization", "Bearer a.b.c")
	Do(f, h, req)
	require.Empty(t, f.joined())

	f = &failures{TB: t}
	Do(f, &canned{status: http.StatusUnauthorized, ctype: jsonType, body: `{"error":{"code":"unauthorized","message":"a Bearer token is required"}}`},
		httptest.NewRequest(http.MethodGet, path, nil))
	require.Empty(t, f.joined(), "a 401 without a token is what the spec describes")
}

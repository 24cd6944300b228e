// Package apitest serves requests to a handler in tests and checks them against
// api/openapi.yaml, so the spec cannot drift from the code. Handler tests send every
// request through Do.
//
// The rules Do enforces, each a t.Errorf naming the request:
//
//   - Every response is validated: its status must be listed for the operation, its
//     body must match that status's schema (error statuses included), and a status
//     the spec gives no body (204, /healthz) must have an empty body.
//   - A request is validated too, but only a request the server accepted (a 2xx
//     answer) fails the test when it does not match the spec: a 2xx to a request the
//     spec forbids means the server lets through what the contract rejects. Tests
//     that deliberately send bad input (malformed JSON, unknown fields, bad UUIDs)
//     and get a 4xx pass.
//   - A request whose method and path are not in the spec passes only when it is
//     answered 404, 405, or 400 (how package web answers a wrong method), with the
//     error body; anything else means the spec is missing a route.
//
// Routes are matched on the path alone, whatever the request's host, because both
// services share one spec. Security is checked by scheme only: an operation that
// needs the bearer token must carry "Authorization: Bearer <something>"; whether
// the token is right is the handler's business.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"

	"github.com/acme/outboxpair/api"
)

// Do serves req to h and returns the recorded response. It fails t (without
// stopping it) when the exchange breaks one of the package's rules. The handler
// reads the same body Do validates.
func Do(t testing.TB, h http.Handler, req *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	s, err := load()
	if err != nil {
		t.Fatalf("apitest: %v", err)
	}
	var body []byte
	if req.Body != nil {
		body, err = io.ReadAll(req.Body)
		if err != nil {
			t.Fatalf("apitest: read request body: %v", err)
		}
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	// The validator reads its own copy: the handler may consume or change req.
	probe := req.Clone(context.Background())
	probe.Body = io.NopCloser(bytes.NewReader(body))

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)

	for _, problem := range s.check(probe, rec) {
		t.Errorf("apitest: %s %s answered %d: %s\nresponse body: %s",
			req.Method, req.URL.RequestURI(), rec.Code, problem, truncate(rec.Body.String(), 2000))
	}
	return rec
}

// Handler wraps h so that every exchange a live server (httptest.NewServer) has
// with a real client is checked as Do checks it. Use it where the client under
// test is not the test itself, such as the relay delivering to billing.
func Handler(t testing.TB, h http.Handler) http.Handler {
	t.Helper()
	if _, err := load(); err != nil {
		t.Fatalf("apitest: %v", err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := Do(t, h, r)
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	})
}

// RequestError is what the spec's validator finds wrong with req (nil when
// api/openapi.yaml allows it), so a test can check that the spec refuses what a
// handler refuses. It reads req's body and puts it back.
func RequestError(req *http.Request) error {
	s, err := load()
	if err != nil {
		return err
	}
	var body []byte
	if req.Body != nil {
		if body, err = io.ReadAll(req.Body); err != nil {
			return err
		}
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
	}
	probe := req.Clone(context.Background())
	probe.Body = io.NopCloser(bytes.NewReader(body))
	route, params, err := s.router.FindRoute(probe)
	if err != nil {
		return err
	}
	return openapi3filter.ValidateRequest(context.Background(), &openapi3filter.RequestValidationInput{
		Request: probe, PathParams: params, Route: route, Options: options(),
	})
}

// spec is the loaded document with its router.
type spec struct {
	doc    *openapi3.T
	router routers.Router
	errors *openapi3.Schema // the error body every unlisted route must answer with
}

var (
	loadOnce sync.Once
	loaded   *spec
	loadErr  error
)

func load() (*spec, error) {
	loadOnce.Do(func() { loaded, loadErr = parse(api.Spec) })
	return loaded, loadErr
}

func parse(data []byte) (*spec, error) {
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(data)
	if err != nil {
		return nil, fmt.Errorf("load api/openapi.yaml: %w", err)
	}
	if err := doc.Validate(loader.Context); err != nil {
		return nil, fmt.Errorf("api/openapi.yaml is not a valid OpenAPI document: %w", err)
	}
	// The servers name the two services' hosts; tests use any host, so route on
	// the path alone.
	doc.Servers = nil
	for _, item := range doc.Paths.Map() {
		item.Servers = nil
	}
	router, err := gorillamux.NewRouter(doc)
	if err != nil {
		return nil, fmt.Errorf("route api/openapi.yaml: %w", err)
	}
	errSchema := doc.Components.Schemas["Error"]
	if errSchema == nil || errSchema.Value == nil {
		return nil, errors.New("api/openapi.yaml has no components.schemas.Error")
	}
	return &spec{doc: doc, router: router, errors: errSchema.Value}, nil
}

// uuidPattern is the canonical 8-4-4-4-12 form, any version: the form the services
// print and the one clients must send. kin-openapi does not check format uuid
// unless told how.
const uuidPattern = `^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`

// nilUUID is the one canonical UUID that the spec's format uuid excludes (its
// UUID schema says so; OpenAPI 3.0's "not" is not decoded for parameters).
const nilUUID = "00000000-0000-0000-0000-000000000000"

// uuidFormat is format uuid as api/openapi.yaml defines it.
func uuidFormat() openapi3.StringFormatValidator {
	canonical := openapi3.NewRegexpFormatValidator(uuidPattern)
	return openapi3.NewCallbackValidator(func(s string) error {
		if err := canonical.Validate(s); err != nil {
			return err
		}
		if s == nilUUID {
			return errors.New("the nil UUID is not an id")
		}
		return nil
	})
}

func options() *openapi3filter.Options {
	return &openapi3filter.Options{
		AuthenticationFunc:    bearerPresent,
		IncludeResponseStatus: true,
		SkipSettingDefaults:   true,
		MultiError:            true,
		SchemaValidationOptions: []openapi3.SchemaValidationOption{
			openapi3.WithStringFormatValidator("uuid", uuidFormat()),
			// Name the failing field and reason without dumping the schema and value.
			openapi3.DisableSchemaErrorDetails(),
		},
	}
}

// bearerPresent checks the shape of the credentials a security scheme asks for,
// not their value.
func bearerPresent(_ context.Context, in *openapi3filter.AuthenticationInput) error {
	s := in.SecurityScheme
	if s == nil || s.Type != "http" || !strings.EqualFold(s.Scheme, "bearer") {
		return nil
	}
	scheme, token, ok := strings.Cut(in.RequestValidationInput.Request.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return in.NewError(errors.New(`want "Authorization: Bearer <token>"`))
	}
	return nil
}

// check returns what is wrong with the exchange of req and rec, nothing when it
// matches the spec.
func (s *spec) check(req *http.Request, rec *httptest.ResponseRecorder) []string {
	ctx := context.Background()
	status := rec.Code
	route, params, err := s.router.FindRoute(req)
	if err != nil {
		switch status {
		case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusBadRequest:
			if err := s.checkErrorBody(rec); err != nil {
				return []string{"route is not in api/openapi.yaml and " + err.Error()}
			}
			return nil
		}
		return []string{fmt.Sprintf("route is not in api/openapi.yaml (%v); add it to the spec", err)}
	}

	var problems []string
	opts := options()
	reqIn := &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params, Route: route, Options: opts,
	}
	if err := openapi3filter.ValidateRequest(ctx, reqIn); err != nil && status >= 200 && status < 300 {
		problems = append(problems, "the server accepted a request that does not match the spec: "+err.Error())
	}

	respIn := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqIn,
		Status:                 status,
		Header:                 rec.Header(),
		Options:                opts,
	}
	respIn.SetBodyBytes(rec.Body.Bytes())
	if err := openapi3filter.ValidateResponse(ctx, respIn); err != nil {
		problems = append(problems, "response does not match the spec: "+err.Error())
	}
	// kin-openapi skips a response the spec gives no content; such a response must
	// have none.
	if ref := route.Operation.Responses.Status(status); ref != nil && ref.Value != nil &&
		len(ref.Value.Content) == 0 && rec.Body.Len() > 0 && req.Method != http.MethodHead {
		problems = append(problems, "the spec gives this status no body, but the response has one")
	}
	return problems
}

func (s *spec) checkErrorBody(rec *httptest.ResponseRecorder) error {
	ct := rec.Header().Get("Content-Type")
	if !strings.HasPrefix(ct, "application/json") {
		return fmt.Errorf("its answer is not the JSON error body (Content-Type %q)", ct)
	}
	var value any
	if err := json.Unmarshal(rec.Body.Bytes(), &value); err != nil {
		return fmt.Errorf("its answer is not JSON: %w", err)
	}
	if err := s.errors.VisitJSON(value, openapi3.MultiErrors()); err != nil {
		return fmt.Errorf("its body is not the error body: %w", err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// GoWords matches what an answer would say if it leaked the implementation's
// Go types instead of the API's words (a decoder's message passed through).
var GoWords = regexp.MustCompile(`labeling\.|billing\.|web\.|struct ?\{|\bu?int(8|16|32|64)?\b|float64|\bjson:|jsontext|Go type|\[\]byte|RawMessage`)

package web_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/web"
)

type pinger struct{ err error }

func (p pinger) Ping(context.Context) error { return p.err }

type bundle struct {
	e   *echo.Echo
	log *strings.Builder
}

func setup(t *testing.T, ping error) bundle {
	t.Helper()
	var log strings.Builder
	logger := slog.New(slog.NewJSONHandler(&log, nil))
	return bundle{e: web.New(logger, pinger{err: ping}), log: &log}
}

func serve(e *echo.Echo, method, path, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

func errorBody(t *testing.T, rec *httptest.ResponseRecorder) web.ErrorBody {
	t.Helper()
	var b web.ErrorBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &b), rec.Body.String())
	return b
}

func TestErrorHandler(t *testing.T) {
	t.Parallel()

	cases := []struct {
		err    error
		status int
		code   string
	}{
		{fault.Errorf(fault.Invalid, "bad name"), 400, "invalid"},
		{fault.Errorf(fault.Unauthorized, "no token"), 401, "unauthorized"},
		{fault.Errorf(fault.NotFound, "no rule"), 404, "not_found"},
		{&fault.Error{Code: fault.Conflict, Reason: "rule_id_conflict", Message: "taken"}, 409, "rule_id_conflict"},
		{fault.Errorf(fault.TooLarge, "big"), 413, "too_large"},
		{fault.Errorf(fault.NotImplemented, "unknown type"), 501, "not_implemented"},
		{fault.Wrap(fault.Unavailable, errors.New("dial tcp: secret-host"), "db"), 503, "unavailable"},
		{errors.New("pq: relation secret_table does not exist"), 500, "internal"},
	}
	for _, tc := range cases {
		t.Run("answers "+tc.code+" with its status", func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			b.e.GET("/x", func(echo.Context) error { return tc.err })
			rec := serve(b.e, http.MethodGet, "/x", "")
			require.Equal(t, tc.status, rec.Code)
			require.Equal(t, tc.code, errorBody(t, rec).Error.Code)
			require.NotContains(t, rec.Body.String(), "secret", "no internals leak")
		})
	}

	t.Run("logs internal errors with their cause and nothing for client errors", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.e.GET("/boom", func(echo.Context) error { return errors.New("disk on fire") })
		b.e.GET("/bad", func(echo.Context) error { return fault.Errorf(fault.Invalid, "nope") })
		serve(b.e, http.MethodGet, "/bad", "")
		require.NotContains(t, b.log.String(), `"level":"ERROR"`)
		serve(b.e, http.MethodGet, "/boom", "")
		require.Contains(t, b.log.String(), "disk on fire")
	})

	t.Run("an unknown route is a 404 error body", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		rec := serve(b.e, http.MethodGet, "/nope", "")
		require.Equal(t, 404, rec.Code)
		require.Equal(t, "not_found", errorBody(t, rec).Error.Code)
	})
}

func TestDecodeJSON(t *testing.T) {
	t.Parallel()

	type body struct {
		Name string `json:"name"`
	}
	handler := func(c echo.Context) error {
		var v body
		if err := web.DecodeJSON(c, &v); err != nil {
			return err
		}
		return c.JSON(http.StatusOK, v)
	}
	cases := []struct {
		name, body string
		status     int
	}{
		{"accepts a well-formed body", `{"name":"a"}`, 200},
		{"rejects an unknown field", `{"name":"a","x":1}`, 400},
		{"rejects malformed JSON", `{"name":`, 400},
		{"rejects an empty body", ``, 400},
		{"rejects a wrong type", `{"name":1}`, 400},
		{"rejects trailing data", `{"name":"a"} {}`, 400},
		{"rejects a body over the limit with 413", `{"name":"` + strings.Repeat("a", web.MaxBody) + `"}`, 413},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil)
			b.e.POST("/x", handler)
			rec := serve(b.e, http.MethodPost, "/x", tc.body)
			require.Equal(t, tc.status, rec.Code, rec.Body.String())
		})
	}
}

func TestHealth(t *testing.T) {
	t.Parallel()

	t.Run("readyz answers 200 when the database answers", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		require.Equal(t, 200, serve(b.e, http.MethodGet, "/readyz", "").Code)
		require.Equal(t, 200, serve(b.e, http.MethodGet, "/healthz", "").Code)
	})

	t.Run("readyz answers 503 when the database does not, healthz still 200", func(t *testing.T) {
		t.Parallel()
		b := setup(t, errors.New("connection refused"))
		require.Equal(t, 503, serve(b.e, http.MethodGet, "/readyz", "").Code)
		require.Equal(t, 200, serve(b.e, http.MethodGet, "/healthz", "").Code)
	})

	t.Run("metrics are in Prometheus text format and count requests by route", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		serve(b.e, http.MethodGet, "/healthz", "")
		rec := serve(b.e, http.MethodGet, "/metrics", "")
		require.Equal(t, 200, rec.Code)
		require.Contains(t, rec.Body.String(), `http_requests_total{code="200",method="GET",route="/healthz"}`)
	})
}

func TestServer(t *testing.T) {
	t.Parallel()

	t.Run("start fails when the port is taken", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		s := web.NewServer(web.Config{Addr: ln.Addr().String()}, echo.New(), slog.New(slog.DiscardHandler))
		require.ErrorContains(t, s.Start(context.Background()), "HTTP_ADDR")
	})

	t.Run("serves after start and refuses after stop", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		s := web.NewServer(web.Config{Addr: "127.0.0.1:0"}, b.e, slog.New(slog.DiscardHandler))
		require.NoError(t, s.Start(context.Background()))
		resp, err := http.Get("http://" + s.Addr() + "/healthz")
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode)
		require.NoError(t, s.Stop(context.Background()))
		resp, err = http.Get("http://" + s.Addr() + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		require.Error(t, err)
	})
}

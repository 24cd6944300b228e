package web_test

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/web"
)

// TestBodies: every route's body is bounded before its handler runs. A
// multipart body is a 415 and a Content-Length over web.MaxBody a 413, both
// answered before a byte of the body is sent (so unread); a body without a
// length that runs over is cut at the bound; the rest reach the handler as
// before. Each on a route that parses forms, where a multipart body would
// otherwise be spooled to a temporary file.
func TestBodies(t *testing.T) {
	t.Parallel()
	var reached, read atomic.Int64
	srv := start(t, func(e *echo.Echo) {
		e.POST("/form", func(c echo.Context) error {
			reached.Add(1)
			// ParseMultipartForm would spool a multipart body to a file;
			// ParseForm reads any other form.
			if err := c.Request().ParseForm(); err != nil {
				return c.String(http.StatusBadRequest, "unreadable")
			}
			if err := c.Request().ParseMultipartForm(1 << 10); err != nil && !errors.Is(err, http.ErrNotMultipart) {
				return c.String(http.StatusBadRequest, "unreadable")
			}
			read.Store(int64(len(c.Request().PostForm.Get("f"))))
			return c.NoContent(http.StatusNoContent)
		})
		e.GET("/get", func(c echo.Context) error { return c.NoContent(http.StatusNoContent) })
	})
	// The header only: the server must answer before the body is sent. Each
	// length is over net/http's own 256 KiB, up to which it would discard an
	// unread body to keep the connection.
	headerOnly := func(t *testing.T, method, path, contentType string, length int) *http.Response {
		conn, err := net.Dial("tcp", srv.s.Addr())
		require.NoError(t, err)
		defer conn.Close()
		return rawRequest(t, conn, fmt.Sprintf("%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n", method, path, contentType, length))
	}

	for name, tc := range map[string]struct {
		contentType string
		length      int
		want        int
		code        string
	}{
		"a multipart form is refused unread":                  {"multipart/form-data; boundary=x", 50 << 20, http.StatusUnsupportedMediaType, "unsupported_media_type"},
		"a multipart type in capitals is refused unread":      {"Multipart/Form-Data; boundary=x", 50 << 20, http.StatusUnsupportedMediaType, "unsupported_media_type"},
		"a malformed multipart type is refused unread":        {"multipart/mixed; boundary", 1 << 20, http.StatusUnsupportedMediaType, "unsupported_media_type"},
		"a form over the bound is refused unread":             {"application/x-www-form-urlencoded", 1 << 20, http.StatusRequestEntityTooLarge, "too_large"},
		"JSON over the bound is refused unread":               {"application/json", 50 << 20, http.StatusRequestEntityTooLarge, "too_large"},
		"a body over the bound on a GET route is refused too": {"application/json", 1 << 20, http.StatusRequestEntityTooLarge, "too_large"},
	} {
		t.Run(name, func(t *testing.T) {
			path := "/form"
			if strings.Contains(name, "GET") {
				path = "/get"
			}
			resp := headerOnly(t, http.MethodPost, path, tc.contentType, tc.length)
			defer resp.Body.Close()
			require.Equal(t, tc.want, resp.StatusCode)
			b, err := io.ReadAll(resp.Body)
			require.NoError(t, err)
			require.Contains(t, string(b), `"code":"`+tc.code+`"`)
		})
	}
	require.Zero(t, reached.Load(), "no refused body reached its handler")

	t.Run("a body without a length is cut at the bound", func(t *testing.T) {
		body := io.MultiReader(strings.NewReader("f="), strings.NewReader(strings.Repeat("a", web.MaxBody)))
		req, err := http.NewRequest(http.MethodPost, srv.base+"/form", io.NopCloser(body)) // a reader of unknown length: chunked
		require.NoError(t, err)
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationForm)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "the form's reader failed at the bound")
	})

	t.Run("a form within the bound reaches its handler whole", func(t *testing.T) {
		resp, err := http.Post(srv.base+"/form", echo.MIMEApplicationForm, strings.NewReader("f="+strings.Repeat("a", web.MaxBody-2)))
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusNoContent, resp.StatusCode)
		require.Equal(t, int64(web.MaxBody-2), read.Load())
	})
}

// TestServerRemovesMultipartFiles: should a handler parse a multipart form
// itself (none does; Bodies refuses one before the handler), its temporary
// files do not outlive the request, although the server hands the handler a
// copy of the request (with its deadline) whose form net/http never sees.
func TestServerRemovesMultipartFiles(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp) // os.TempDir, where multipart files go; so not parallel
	logger := slog.New(slog.NewJSONHandler(io.Discard, nil))
	e := echo.New()
	e.POST("/upload", func(c echo.Context) error {
		if err := c.Request().ParseMultipartForm(1); err != nil {
			return err
		}
		return c.NoContent(http.StatusNoContent)
	})
	ts := httptest.NewServer(web.NewServer(web.Config{}, e, logger))
	defer ts.Close()
	body := "--x\r\nContent-Disposition: form-data; name=\"f\"; filename=\"f\"\r\n\r\n" + strings.Repeat("z", 4<<10) + "\r\n--x--\r\n"
	resp, err := http.Post(ts.URL+"/upload", "multipart/form-data; boundary=x", strings.NewReader(body))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, entries, "the form's temporary file is removed with the request")
}

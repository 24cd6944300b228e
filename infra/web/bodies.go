package web

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/acme/outboxpair/infra/fault"
)

// MaxBody is the largest request body any route reads (Bodies bounds every
// one; DecodeJSON reads at most this much); more is a 413.
const MaxBody = 64 << 10

// Bodies bounds the body of every request before any handler or middleware
// of a route can read it: a multipart body (of any multipart type) is a 415
// and one whose Content-Length is over MaxBody a 413, both without reading a
// byte of it; any other body is read through an http.MaxBytesReader of
// MaxBody bytes, so a body without a length (chunked) that runs over is cut
// there and its reader fails. Nothing a route does can then hold more than
// MaxBody bytes of a request in memory, nor write one to disk (only a
// multipart form is spooled to temporary files, and none is parsed). A route
// may bound its bodies tighter (LimitBody).
func Bodies(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if err := LimitBody(c, MaxBody); err != nil {
			return err
		}
		return next(c)
	}
}

// LimitBody refuses, without reading it, a request body that is multipart
// (415) or whose Content-Length is over limit (413), and bounds the rest to
// limit bytes with an http.MaxBytesReader. A request without a body passes.
func LimitBody(c echo.Context, limit int64) error {
	r := c.Request()
	if r.Body == nil || r.Body == http.NoBody {
		return nil
	}
	// The raw value, not mime.ParseMediaType's: a malformed multipart type is
	// refused too, whatever a later parser would make of it.
	if ct := strings.ToLower(strings.TrimSpace(r.Header.Get(echo.HeaderContentType))); strings.HasPrefix(ct, "multipart/") {
		return fault.Errorf(fault.UnsupportedMediaType, "multipart bodies are not accepted")
	}
	if r.ContentLength > limit {
		return fault.Errorf(fault.TooLarge, "body is larger than %d bytes", limit)
	}
	r.Body = http.MaxBytesReader(c.Response(), r.Body, limit)
	return nil
}

package web

import (
	"sort"

	"github.com/labstack/echo/v4"

	"github.com/acme/outboxpair/infra/fault"
)

// CheckQuery refuses a request whose query holds a parameter not in allowed, or
// one of them more than once: the contract makes anything else in a query a 400
// on every API operation, and a repeated parameter has no single meaning.
func CheckQuery(c echo.Context, allowed ...string) error {
	q := c.QueryParams()
	names := make([]string, 0, len(q))
	for name := range q {
		names = append(names, name)
	}
	sort.Strings(names) // name the same parameter on every run
	for _, name := range names {
		known := false
		for _, a := range allowed {
			known = known || a == name
		}
		switch {
		case !known:
			return fault.Errorf(fault.Invalid, "unknown query parameter %q", Clip(name, MaxEcho))
		case len(q[name]) > 1:
			return fault.Errorf(fault.Invalid, "query parameter %q given more than once", Clip(name, MaxEcho))
		}
	}
	return nil
}

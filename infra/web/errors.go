package web

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/acme/outboxpair/infra/fault"
)

// MaxEcho is the most characters of client input an error message or a log line
// repeats (the README's promise): every echo of client input goes through
// Clip(s, MaxEcho).
const MaxEcho = 64

// Clip returns s cut to at most n runes, with "…" when it was cut, so that an
// error message or a log line never repeats a client's whole input.
func Clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	i, count := 0, 0
	for i = range s {
		if count == n {
			break
		}
		count++
	}
	return s[:i] + "…"
}

// statuses is the one table from error code to HTTP status.
var statuses = map[fault.Code]int{
	fault.Invalid:              http.StatusBadRequest,
	fault.Unauthorized:         http.StatusUnauthorized,
	fault.NotFound:             http.StatusNotFound,
	fault.Conflict:             http.StatusConflict,
	fault.TooLarge:             http.StatusRequestEntityTooLarge,
	fault.UnsupportedMediaType: http.StatusUnsupportedMediaType,
	fault.NotImplemented:       http.StatusNotImplemented,
	fault.Unavailable:          http.StatusServiceUnavailable,
	fault.Internal:             http.StatusInternalServerError,
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// StatusClientClosed answers a request whose client went away before its answer
// (nginx's 499): not a server error, so it stays out of the 5xx alert.
const StatusClientClosed = 499

// ErrorHandler answers err with the status of its code and an ErrorBody. Internal
// and Unavailable errors are logged with their cause and answered with a generic
// message; nothing else is logged. A request whose client went away (its context
// cancelled) is answered 499 and not logged, whatever code the use case gave it:
// both services classify it here, the same way.
func ErrorHandler(logger *slog.Logger) echo.HTTPErrorHandler {
	return func(err error, c echo.Context) {
		if c.Response().Committed {
			return
		}
		method, route := MethodLabel(c.Request().Method), routeLabel(c)
		ctx := c.Request().Context()
		if errors.Is(err, context.Canceled) && errors.Is(c.Request().Context().Err(), context.Canceled) {
			var body ErrorBody
			body.Error.Code, body.Error.Message = "client_closed_request", "the client went away"
			_ = c.JSON(StatusClientClosed, body)
			return
		}
		fe := asFault(err)
		status := statuses[fe.Code]
		if status == 0 {
			status = http.StatusInternalServerError
		}
		var body ErrorBody
		body.Error.Code = string(fe.Code)
		if fe.Reason != "" {
			body.Error.Code = fe.Reason
		}
		body.Error.Message = fe.Message
		switch fe.Code {
		case fault.Internal:
			var p *panicError
			if errors.As(err, &p) {
				logger.ErrorContext(ctx, "handler panicked", "method", method, "route", route,
					"panic", Clip(fmt.Sprint(p.value), 1000), "stack", string(p.stack))
			} else {
				logger.ErrorContext(ctx, "request failed", "method", method, "route", route, "error", err)
			}
			body.Error.Message = "internal error"
		case fault.Unavailable:
			logger.WarnContext(ctx, "request failed: dependency unavailable", "method", method, "route", route, "error", err)
			body.Error.Message = "service unavailable, retry later"
		}
		if c.Request().Method == http.MethodHead {
			_ = c.NoContent(status)
			return
		}
		_ = c.JSON(status, body)
	}
}

func asFault(err error) *fault.Error {
	var fe *fault.Error
	if errors.As(err, &fe) {
		return fe
	}
	var he *echo.HTTPError
	if errors.As(err, &he) {
		msg := http.StatusText(he.Code)
		switch {
		case he.Code == http.StatusNotFound:
			return &fault.Error{Code: fault.NotFound, Message: "no such route"}
		case he.Code == http.StatusMethodNotAllowed:
			return &fault.Error{Code: fault.Invalid, Reason: "method_not_allowed", Message: msg}
		case he.Code == http.StatusRequestEntityTooLarge:
			return &fault.Error{Code: fault.TooLarge, Message: msg}
		case he.Code == http.StatusUnsupportedMediaType:
			return &fault.Error{Code: fault.UnsupportedMediaType, Message: msg}
		case he.Code == http.StatusUnauthorized:
			return &fault.Error{Code: fault.Unauthorized, Message: msg}
		case he.Code >= 400 && he.Code < 500:
			return &fault.Error{Code: fault.Invalid, Message: msg}
		}
	}
	return &fault.Error{Code: fault.Internal, Message: "internal error", Err: err}
}

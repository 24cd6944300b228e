// Package fault is the one error type of the services. An error carries a Code from
// a small set; the HTTP layer maps each code to one status in one table, and only
// Internal errors are logged with their cause. Anything that is not a *Error is
// Internal.
package fault

import (
	"errors"
	"fmt"
)

// Code classifies an error by what the caller can do about it.
type Code string

// The codes. Each maps to exactly one HTTP status in package web.
const (
	Invalid              Code = "invalid"                // the input is wrong; retrying it will not help
	Unauthorized         Code = "unauthorized"           // missing or wrong credentials
	NotFound             Code = "not_found"              // no such thing, or not visible to the caller
	Conflict             Code = "conflict"               // the input contradicts stored state
	TooLarge             Code = "too_large"              // the request body is over its limit
	UnsupportedMediaType Code = "unsupported_media_type" // a request body that is not application/json
	NotImplemented       Code = "not_implemented"        // a well-formed request this service does not handle
	Unavailable          Code = "unavailable"            // a dependency (the database) is down; retry later
	Internal             Code = "internal"               // a defect
)

// Error is an error with a code, a message safe to show the caller, and an optional
// cause that is only logged.
type Error struct {
	Code    Code
	Reason  string // machine-readable code for the response body; Code when empty
	Message string // safe to show the caller
	Err     error  // the cause, never shown to the caller
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%s: %s: %v", e.Code, e.Message, e.Err)
	}
	return fmt.Sprintf("%s: %s", e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with code and a formatted message.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Wrap returns an *Error with code and message whose cause is err.
func Wrap(code Code, err error, message string) *Error {
	return &Error{Code: code, Message: message, Err: err}
}

// CodeOf returns the code of err, Internal when err is not an *Error.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Internal
}

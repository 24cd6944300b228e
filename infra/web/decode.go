package web

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"strings"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/labstack/echo/v4"

	"github.com/acme/outboxpair/infra/fault"
)

// DecodeJSON decodes the request body into v exactly as strictly as
// api/openapi.yaml says: a Content-Type of application/json (else 415), at most
// MaxBody bytes (else 413), one JSON value of v's shape whose member names match
// v's json tags exactly (another letter case is an unknown member), no member
// unknown to v and none given twice, in any object of the body, and strings that
// are valid UTF-8 and hold no NUL (U+0000). Every failure is an *fault.Error
// whose message names the member by its JSON pointer and the JSON kind it must
// be, never a Go type. A json.RawMessage field in v takes its value as sent,
// after the same checks of names and strings.
func DecodeJSON(c echo.Context, v any) error {
	return DecodeAs(c, v, echo.MIMEApplicationJSON)
}

// DecodeAs is DecodeJSON for a JSON body of another media type (such as
// application/cloudevents+json): its Content-Type must be mediaType (else
// 415), and every other rule is DecodeJSON's.
func DecodeAs(c echo.Context, v any, mediaType string) error {
	raw, err := readBody(c)
	if err != nil {
		return err
	}
	if len(raw) > 0 {
		if err := requireType(c.Request(), mediaType); err != nil {
			return err
		}
	}
	return Unmarshal(raw, v)
}

// DecodeEmpty accepts a request that has no body (or only white space) or whose
// body is the empty JSON object: what many clients send with every POST. Any other
// body is refused as DecodeJSON refuses one for a struct with no fields: 415
// without application/json, 400 for anything but {}.
func DecodeEmpty(c echo.Context) error {
	raw, err := readBody(c)
	if err != nil {
		return err
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil
	}
	if err := requireType(c.Request(), echo.MIMEApplicationJSON); err != nil {
		return err
	}
	return Unmarshal(raw, &struct{}{})
}

// Unmarshal decodes raw into v with DecodeJSON's rules of names, shape, UTF-8
// and NUL, for a body that arrived some other way (a NATS message).
func Unmarshal(raw []byte, v any) error {
	if len(bytes.TrimSpace(raw)) == 0 {
		return fault.Errorf(fault.Invalid, "body is empty")
	}
	// NUL is the one rule the unmarshal below does not check: JSON allows it,
	// but no field of this API does (PostgreSQL text cannot hold it). A JSON
	// string can hold NUL only as the escape \u0000 (a raw control byte is
	// invalid JSON, which the unmarshal refuses), so a body without that escape
	// takes one pass, not two: the consumer drain's profile put the second at a
	// third of the decoding (bench/results/2026-12-04.md, "The consumer's limit").
	if bytes.Contains(raw, nulEscape) {
		if err := refuseNUL(raw); err != nil {
			return err
		}
	}
	// The unmarshal refuses a duplicate member and invalid UTF-8 anywhere,
	// json.RawMessage members included, as jsontext reads every value whole.
	if err := jsonv2.Unmarshal(raw, v, jsonv2.RejectUnknownMembers(true)); err != nil {
		return decodeError(err)
	}
	return nil
}

// nulEscape is how NUL appears in a JSON string; its u is lowercase only.
var nulEscape = []byte(`\u0000`)

// refuseNUL passes over raw's tokens and refuses the first string, member
// names included, that holds NUL, naming it by its JSON pointer; a syntax
// error before it is refused as the unmarshal would (a duplicate member, bad
// UTF-8, ...).
func refuseNUL(raw []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	for {
		tok, err := dec.ReadToken()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return decodeError(err)
		}
		if tok.Kind() == '"' && strings.ContainsRune(tok.String(), 0) {
			return fault.Errorf(fault.Invalid, "%s must not contain NUL (U+0000)", where(dec.StackPointer()))
		}
	}
}

// readBody reads at most MaxBody bytes of the request body.
func readBody(c echo.Context) ([]byte, error) {
	raw, err := io.ReadAll(http.MaxBytesReader(c.Response(), c.Request().Body, MaxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, fault.Errorf(fault.TooLarge, "body is larger than %d bytes", tooLarge.Limit)
	case err != nil:
		// It came from reading the body (a timeout, a reset connection), and its
		// text may name internal addresses: answer a fixed message.
		return nil, fault.Errorf(fault.Invalid, "body could not be read")
	}
	return raw, nil
}

// requireType refuses a body whose Content-Type is missing or is not
// mediaType (parameters such as charset=utf-8 are allowed).
func requireType(r *http.Request, mediaType string) error {
	ct := r.Header.Get(echo.HeaderContentType)
	if ct == "" {
		return fault.Errorf(fault.UnsupportedMediaType, "Content-Type must be %s, got none", mediaType)
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || mt != mediaType {
		return fault.Errorf(fault.UnsupportedMediaType, "Content-Type must be %s, got %q", mediaType, Clip(ct, MaxEcho))
	}
	return nil
}

// where names a member of the body by its JSON pointer, in words.
func where(p jsontext.Pointer) string {
	if p == "" {
		return "body"
	}
	return fmt.Sprintf("field %q", Clip(string(p), MaxEcho))
}

func decodeError(err error) error {
	var syntax *jsontext.SyntacticError
	var semantic *jsonv2.SemanticError
	switch {
	case errors.As(err, &syntax):
		switch {
		case errors.Is(syntax.Err, jsontext.ErrDuplicateName):
			return fault.Errorf(fault.Invalid, "%s: a member is given more than once", where(syntax.JSONPointer))
		case errors.Is(syntax.Err, io.ErrUnexpectedEOF):
			return fault.Errorf(fault.Invalid, "body is not valid JSON (it ends early)")
		case strings.Contains(syntax.Error(), "after top-level value"):
			return fault.Errorf(fault.Invalid, "body must hold a single JSON value")
		case strings.Contains(syntax.Error(), "UTF-8"), strings.Contains(syntax.Error(), "surrogate"):
			return fault.Errorf(fault.Invalid, "%s must be valid UTF-8", where(syntax.JSONPointer))
		}
		return fault.Errorf(fault.Invalid, "body is not valid JSON (at byte %d)", syntax.ByteOffset)
	case errors.As(err, &semantic):
		if errors.Is(semantic.Err, jsonv2.ErrUnknownName) {
			name := string(semantic.JSONPointer)
			if i := strings.LastIndexByte(name, '/'); i >= 0 {
				name = name[i+1:]
			}
			return fault.Errorf(fault.Invalid, "body: unknown field %q", Clip(strings.NewReplacer("~1", "/", "~0", "~").Replace(name), MaxEcho))
		}
		return fault.Errorf(fault.Invalid, "%s must be %s", where(semantic.JSONPointer), jsonKind(semantic.GoType))
	}
	return fault.Errorf(fault.Invalid, "body is not valid JSON")
}

// jsonKind names, in JSON's words, what a value decoded into t must be.
func jsonKind(t reflect.Type) string {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "another JSON value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a JSON string"
	case reflect.Bool:
		return "a JSON boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a JSON integer in range"
	case reflect.Float32, reflect.Float64:
		return "a JSON number"
	case reflect.Struct, reflect.Map:
		return "a JSON object"
	case reflect.Slice, reflect.Array:
		return "a JSON array"
	}
	return "another JSON value"
}

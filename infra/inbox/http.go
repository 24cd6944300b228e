package inbox

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/infra/wire"
)

// Intake is the HTTP intake of an Inbox: the handler of the delivery
// endpoint (contract section 4) behind the events token.
type Intake[V any] struct {
	ib    *Inbox[V]
	token [sha256.Size]byte // a digest, so the comparison takes the same time for every length
	// previous is the previous token's digest, when set (a rotation).
	previous    [sha256.Size]byte
	hasPrevious bool
}

// NewIntake returns the HTTP intake of ib, accepting Bearer token and, when
// not empty, previous (the old token during a rotation). It fails when no
// token is given: an empty token would let anyone deliver events.
func NewIntake[V any](ib *Inbox[V], token, previous string) (*Intake[V], error) {
	if token == "" {
		return nil, errors.New("EVENTS_TOKEN: required but not set")
	}
	in := &Intake[V]{ib: ib, token: sha256.Sum256([]byte(token))}
	if previous != "" {
		in.previous, in.hasPrevious = sha256.Sum256([]byte(previous)), true
	}
	return in, nil
}

// Deliver is the echo handler of the delivery endpoint. It applies one
// delivered event and answers 204 only after the commit, for a new event and
// for a redelivery alike; 400 for a delivery no retry can fix (a malformed
// envelope, an invalid payload, an Idempotency-Key other than the body's id,
// an event too old); 401 without the token; 501, writing nothing, for a type
// without a handler, so the sender retries it until the consumer has one;
// 503 when the database is down.
func (in *Intake[V]) Deliver(c echo.Context) error {
	ib := in.ib
	if err := in.authorize(c.Request()); err != nil {
		c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="`+ib.c.Name+`"`)
		return err
	}
	if err := web.CheckQuery(c); err != nil {
		ib.countEvent(TypeOther, OutcomeRejected)
		return err
	}
	ev, err := readHTTP(c)
	if err != nil {
		ib.countEvent(TypeOther, OutcomeRejected)
		return err
	}
	// The event's id is the dedup key. The header is optional, but when sent it must
	// name the same event: a disagreement means a broken sender, not a retry.
	if key := c.Request().Header.Get("Idempotency-Key"); key != "" {
		if k, err := wire.ParseID(key); err != nil || k != ev.ID {
			ib.countEvent(ev.Type, OutcomeRejected)
			return fault.Errorf(fault.Invalid, "Idempotency-Key must equal the event's id")
		}
	}
	e, err := ib.Decode(ev.ID, ev.Type, ev.OccurredAt, ev.Payload)
	if err != nil {
		ib.decodeFailed(c.Request().Context(), ev.ID, ev.Type, err)
		return err
	}
	applied, err := ib.Apply(c.Request().Context(), e)
	ib.countApply(ev.Type, applied, err)
	if err != nil {
		return err
	}
	// Committed; a crash here loses only the answer, and the redelivery that
	// follows finds the receipt.
	if err := inject(ib.c.Failpoints.AfterCommit); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// readHTTP reads the delivered event in whichever format it came (format.go):
// the envelope or a binary-mode CloudEvent as application/json, a
// structured CloudEvent as application/cloudevents+json; any other
// Content-Type is a 415.
func readHTTP(c echo.Context) (wire.Event, error) {
	r := c.Request()
	switch formatOf(r.Header.Get(echo.HeaderContentType), r.Header.Get(wire.HeaderSpecVersion) != "") {
	case formatStructured:
		var s wire.Structured
		if err := web.DecodeAs(c, &s, wire.ContentTypeStructured); err != nil {
			return wire.Event{}, err
		}
		return s.Event()
	case formatBinary:
		var payload json.RawMessage
		if err := web.DecodeJSON(c, &payload); err != nil {
			return wire.Event{}, err
		}
		return wire.ReadBinary(r.Header.Get, payload)
	}
	var env wire.Received
	if err := web.DecodeJSON(c, &env); err != nil {
		return wire.Event{}, err
	}
	return env.Event()
}

// authorize accepts only "Authorization: Bearer <token>", or the previous
// token when set (the scheme in any case, as RFC 9110 allows), comparing in
// constant time against both, whichever matches.
func (in *Intake[V]) authorize(r *http.Request) error {
	scheme, token, ok := strings.Cut(r.Header.Get(echo.HeaderAuthorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return fault.Errorf(fault.Unauthorized, "a Bearer token is required")
	}
	got := sha256.Sum256([]byte(token))
	ok = subtle.ConstantTimeCompare(got[:], in.token[:]) == 1
	// Compared even when the current token matched, so the time says nothing.
	prev := subtle.ConstantTimeCompare(got[:], in.previous[:]) == 1 && in.hasPrevious
	if !ok && !prev {
		return fault.Errorf(fault.Unauthorized, "the token is not valid")
	}
	return nil
}

package billing

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/failpoint"
	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/web"
)

// Config is what billing needs from the service's configuration.
type Config struct {
	EventsToken string // the shared secret senders present as a Bearer token
	// EventsTokenPrevious (EVENTS_TOKEN_PREVIOUS), when set, is accepted too:
	// the old token during a rotation (docs/authentication.md).
	EventsTokenPrevious string
	ReceiptsRetention   time.Duration // receipts older than this are deleted
	// ApplyGroupMax bounds the events one apply transaction takes (group apply);
	// 1 turns grouping off, 0 keeps DefaultApplyGroupMax.
	ApplyGroupMax int
}

// Validate reports the first setting of c that billing refuses, as "Field:
// what is wrong": Check with the fields' own names.
func (c Config) Validate() error { return c.Check(func(field string) string { return field }) }

// Check is Validate with each field named by name(field) (infra/config
// passes the environment variable's): a previous token equal to the token
// (a rotation needs a new one), a negative retention, a group max out of its
// range. An empty EventsToken is NewHandler's to refuse: the operator
// commands that read these settings need none.
func (c Config) Check(name func(field string) string) error {
	switch {
	case c.EventsTokenPrevious != "" && c.EventsTokenPrevious == c.EventsToken:
		return fmt.Errorf("%s: equals %s: a rotation needs a new token (or unset the previous one)",
			name("EventsTokenPrevious"), name("EventsToken"))
	case c.ReceiptsRetention < 0:
		return fmt.Errorf("%s: %s must not be negative", name("ReceiptsRetention"), c.ReceiptsRetention)
	case c.ApplyGroupMax < 0 || c.ApplyGroupMax > MaxApplyGroupMax:
		return fmt.Errorf("%s: %d is not within 0 to %d", name("ApplyGroupMax"), c.ApplyGroupMax, MaxApplyGroupMax)
	}
	return nil
}

// Handler serves billing's HTTP API.
type Handler struct {
	svc   *Service
	token [sha256.Size]byte // a digest, so the comparison takes the same time for every length
	// previous is EVENTS_TOKEN_PREVIOUS's digest, when set.
	previous    [sha256.Size]byte
	hasPrevious bool
}

// NewHandler returns the handlers over svc. It fails when no token is configured:
// an empty token would let anyone deliver events.
func NewHandler(svc *Service, cfg Config) (*Handler, error) {
	if cfg.EventsToken == "" {
		return nil, errors.New("EVENTS_TOKEN: required but not set")
	}
	h := &Handler{svc: svc, token: sha256.Sum256([]byte(cfg.EventsToken))}
	if cfg.EventsTokenPrevious != "" {
		h.previous, h.hasPrevious = sha256.Sum256([]byte(cfg.EventsTokenPrevious)), true
	}
	return h, nil
}

// Register adds billing's routes to e. The quota is behind guard's check that the
// caller's token covers the path's org; event delivery keeps EVENTS_TOKEN.
func (h *Handler) Register(e *echo.Echo, guard *auth.Guard) {
	e.POST("/internal/v1/events", h.deliver)
	e.GET("/v1/orgs/:orgId/quota", h.quota, guard.Org("orgId", nil))
}

// deliver applies one delivered event. It answers 204 only after the commit, for a
// new event and for a redelivery alike; 400 for a delivery no retry can fix; 501,
// writing nothing, for a type without a handler, so the sender retries it until
// billing has one or an operator acts; 503 when the database is down.
func (h *Handler) deliver(c echo.Context) error {
	if err := h.authorize(c.Request()); err != nil {
		c.Response().Header().Set(echo.HeaderWWWAuthenticate, `Bearer realm="billing"`)
		return err
	}
	var env Envelope
	if err := web.CheckQuery(c); err != nil {
		h.svc.countEvent(typeOther, OutcomeRejected)
		return err
	}
	if err := web.DecodeJSON(c, &env); err != nil {
		h.svc.countEvent(typeOther, OutcomeRejected)
		return err
	}
	id, typ, err := env.Header()
	if err != nil {
		h.svc.countEvent(typeOther, OutcomeRejected)
		return err
	}
	// The body's id is the dedup key. The header is optional, but when sent it must
	// name the same event: a disagreement means a broken sender, not a retry.
	if key := c.Request().Header.Get("Idempotency-Key"); key != "" {
		if k, err := ParseID(key); err != nil || k != id {
			h.svc.countEvent(typ, OutcomeRejected)
			return fault.Errorf(fault.Invalid, "Idempotency-Key must equal the body's id")
		}
	}
	e, err := h.svc.Decode(id, typ, *env.OccurredAt, env.Payload)
	if err != nil {
		h.svc.countDecodeFailure(typ, err)
		return err
	}
	applied, err := h.svc.Apply(c.Request().Context(), e)
	h.svc.countApply(typ, applied, err)
	if err != nil {
		return err
	}
	// Committed; a crash here loses only the answer, and the redelivery that
	// follows finds the receipt.
	if err := failpoint.Inject(failpoint.BillingEventsAfterCommit); err != nil {
		return err
	}
	return c.NoContent(http.StatusNoContent)
}

// authorize accepts only "Authorization: Bearer <EVENTS_TOKEN>", or the
// EVENTS_TOKEN_PREVIOUS when set (the scheme in any case, as RFC 9110 allows),
// comparing in constant time against both, whichever matches.
func (h *Handler) authorize(r *http.Request) error {
	scheme, token, ok := strings.Cut(r.Header.Get(echo.HeaderAuthorization), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || token == "" {
		return fault.Errorf(fault.Unauthorized, "a Bearer token is required")
	}
	got := sha256.Sum256([]byte(token))
	ok = subtle.ConstantTimeCompare(got[:], h.token[:]) == 1
	// Compared even when the current token matched, so the time says nothing.
	prev := subtle.ConstantTimeCompare(got[:], h.previous[:]) == 1 && h.hasPrevious
	if !ok && !prev {
		return fault.Errorf(fault.Unauthorized, "the token is not valid")
	}
	return nil
}

// QuotaBody is the answer of GET /v1/orgs/{orgId}/quota.
type QuotaBody struct {
	OrgID       string `json:"orgId"`
	ActiveRules int64  `json:"activeRules"`
}

func (h *Handler) quota(c echo.Context) error {
	if err := web.CheckQuery(c); err != nil {
		return err
	}
	org, err := ParseOrgID(c.Param("orgId"))
	if err != nil {
		return err
	}
	q, err := h.svc.Quota(c.Request().Context(), org)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, QuotaBody{OrgID: q.OrgID.String(), ActiveRules: q.ActiveRules})
}

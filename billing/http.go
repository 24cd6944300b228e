package billing

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/inbox"
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
// what is wrong": a previous token equal to the token (a rotation needs a new
// one), a negative retention, a group max out of its range. An empty
// EventsToken is NewHandler's to refuse: the operator commands that read
// these settings need none.
func (c Config) Validate() error {
	switch {
	case c.EventsTokenPrevious != "" && c.EventsTokenPrevious == c.EventsToken:
		return errors.New("EventsTokenPrevious: equals EventsToken: a rotation needs a new token (or unset the previous one)")
	case c.ReceiptsRetention < 0:
		return fmt.Errorf("ReceiptsRetention: %s must not be negative", c.ReceiptsRetention)
	case c.ApplyGroupMax < 0 || c.ApplyGroupMax > MaxApplyGroupMax:
		return fmt.Errorf("ApplyGroupMax: %d is not within 0 to %d", c.ApplyGroupMax, MaxApplyGroupMax)
	}
	return nil
}

// Handler serves billing's HTTP API: the inbox's intake of events and the
// quota.
type Handler struct {
	svc    *Service
	intake *inbox.Intake[Effect]
}

// NewHandler returns the handlers over svc. It fails when no token is configured:
// an empty token would let anyone deliver events.
func NewHandler(svc *Service, cfg Config) (*Handler, error) {
	if cfg.EventsToken == "" {
		return nil, errors.New("EVENTS_TOKEN: required but not set")
	}
	intake, err := inbox.NewIntake(svc.Inbox, cfg.EventsToken, cfg.EventsTokenPrevious)
	if err != nil {
		return nil, err
	}
	return &Handler{svc: svc, intake: intake}, nil
}

// Register adds billing's routes to e. The quota is behind guard's check that the
// caller's token covers the path's org; event delivery keeps EVENTS_TOKEN.
func (h *Handler) Register(e *echo.Echo, guard *auth.Guard) {
	e.POST("/internal/v1/events", h.intake.Deliver)
	e.GET("/v1/orgs/:orgId/quota", h.quota, guard.Org("orgId", nil))
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

package labeling

import (
	"context"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/web"
)

// Handler serves the rules API of contract section 3 over the use cases.
type Handler struct {
	svc *Service
}

// NewHandler returns the HTTP handlers of svc.
func NewHandler(svc *Service) *Handler { return &Handler{svc: svc} }

// Register adds the rules routes to e, each behind guard's check that the
// caller's token covers the path's org.
func (h *Handler) Register(e *echo.Echo, guard *auth.Guard) {
	org := guard.Org("orgId", ErrRuleNotFound)
	e.POST("/v1/orgs/:orgId/rules", h.create, org)
	e.GET("/v1/orgs/:orgId/rules", h.list, org)
	e.GET("/v1/orgs/:orgId/rules/:ruleId", h.get, org)
	e.POST("/v1/orgs/:orgId/rules/:ruleId/activate", h.activate, org)
	e.POST("/v1/orgs/:orgId/rules/:ruleId/deactivate", h.deactivate, org)
}

// RuleJSON is a rule in a response.
type RuleJSON struct {
	ID        string `json:"id"`
	OrgID     string `json:"orgId"`
	Name      string `json:"name"`
	Pattern   string `json:"pattern"`
	Label     string `json:"label"`
	Active    bool   `json:"active"`
	CreatedAt string `json:"createdAt"`
	UpdatedAt string `json:"updatedAt"`
}

// PageJSON is the response of a listing. Rules is never null; Next is null on the
// last page.
type PageJSON struct {
	Rules []RuleJSON `json:"rules"`
	Next  *string    `json:"next"`
}

// CreateJSON is the body of a create.
type CreateJSON struct {
	ID      string `json:"id"`
	Name    string `json:"name"`
	Pattern string `json:"pattern"`
	Label   string `json:"label"`
}

func toJSON(r Rule) RuleJSON {
	return RuleJSON{
		ID: r.ID.String(), OrgID: r.OrgID.String(),
		Name: r.Name, Pattern: r.Pattern, Label: r.Label, Active: r.Active,
		CreatedAt: FormatTime(r.CreatedAt), UpdatedAt: FormatTime(r.UpdatedAt),
	}
}

func (h *Handler) create(c echo.Context) error {
	org, err := orgParam(c, nil)
	if err != nil {
		return err
	}
	var body CreateJSON
	if err := web.DecodeJSON(c, &body); err != nil {
		return err
	}
	n, err := NewRuleFrom(body.ID, body.Name, body.Pattern, body.Label)
	if err != nil {
		return err
	}
	rule, created, err := h.svc.Create(c.Request().Context(), org, n)
	if err != nil {
		return err
	}
	if !created {
		return c.JSON(http.StatusOK, toJSON(rule))
	}
	c.Response().Header().Set(echo.HeaderLocation, "/v1/orgs/"+org.String()+"/rules/"+rule.ID.String())
	return c.JSON(http.StatusCreated, toJSON(rule))
}

func (h *Handler) get(c echo.Context) error {
	org, id, err := ruleParams(c)
	if err != nil {
		return err
	}
	rule, err := h.svc.Get(c.Request().Context(), org, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toJSON(rule))
}

func (h *Handler) list(c echo.Context) error {
	org, err := orgParam(c, []string{"limit", "after"})
	if err != nil {
		return err
	}
	q := c.QueryParams()
	limit := DefaultPageSize
	if v, ok := q["limit"]; ok {
		n, err := strconv.Atoi(v[0])
		if err != nil || n < 1 || n > MaxPageSize {
			return fault.Errorf(fault.Invalid, "limit must be an integer from 1 to %d, got %q", MaxPageSize, web.Clip(v[0], web.MaxEcho))
		}
		limit = n
	}
	var after *RuleID
	if v, ok := q["after"]; ok {
		id, err := parseID("after", v[0])
		if err != nil {
			return err
		}
		after = &RuleID{id}
	}
	page, err := h.svc.List(c.Request().Context(), org, after, limit)
	if err != nil {
		return err
	}
	out := PageJSON{Rules: make([]RuleJSON, 0, len(page.Rules))}
	for _, r := range page.Rules {
		out.Rules = append(out.Rules, toJSON(r))
	}
	if page.Next != nil {
		next := page.Next.String()
		out.Next = &next
	}
	return c.JSON(http.StatusOK, out)
}

func (h *Handler) activate(c echo.Context) error {
	return h.setState(c, h.svc.Activate)
}

func (h *Handler) deactivate(c echo.Context) error {
	return h.setState(c, h.svc.Deactivate)
}

func (h *Handler) setState(c echo.Context, change func(context.Context, OrgID, RuleID) (Rule, error)) error {
	org, id, err := ruleParams(c)
	if err != nil {
		return err
	}
	if err := web.DecodeEmpty(c); err != nil {
		return err
	}
	rule, err := change(c.Request().Context(), org, id)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, toJSON(rule))
}

// orgParam decodes the orgId path parameter after checking that the query holds
// only the allowed parameters, each at most once: the contract makes anything
// else in a query a 400, and a repeated parameter has no single meaning.
func orgParam(c echo.Context, allowed []string) (OrgID, error) {
	if err := web.CheckQuery(c, allowed...); err != nil {
		return OrgID{}, err
	}
	return ParseOrgID(c.Param("orgId"))
}

func ruleParams(c echo.Context) (OrgID, RuleID, error) {
	org, err := orgParam(c, nil)
	if err != nil {
		return OrgID{}, RuleID{}, err
	}
	id, err := ParseRuleID(c.Param("ruleId"))
	return org, id, err
}

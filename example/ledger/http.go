package ledger

import (
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
)

// DefaultListLimit and MaxListLimit bound GET /v1/entries (?limit=).
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// Register adds the ledger's routes to e: the intake of events at POST
// /internal/v1/events (intake, behind the events token), and the reads, GET
// /v1/entries/count ({"count":N}) and GET /v1/entries (the last entries,
// newest first). The reads carry no authentication: the example serves them
// on loopback (a team puts its own guard on them).
func Register(e *echo.Echo, db sqldb.DB, ib *inbox.Inbox[Entry], intake *inbox.Intake[Entry]) {
	e.POST("/internal/v1/events", intake.Deliver)
	RegisterReads(e, db, ib)
}

// RegisterReads adds the reads alone: GET /v1/entries/count and GET
// /v1/entries (?limit=, 1 to MaxListLimit, default DefaultListLimit).
func RegisterReads(e *echo.Echo, db sqldb.DB, ib *inbox.Inbox[Entry]) {
	e.GET("/v1/entries/count", func(c echo.Context) error {
		n, err := Count(c.Request().Context(), db)
		if err != nil {
			return ib.Classify(err)
		}
		return c.JSON(http.StatusOK, map[string]int64{"count": n})
	})
	e.GET("/v1/entries", func(c echo.Context) error {
		limit := DefaultListLimit
		if s := c.QueryParam("limit"); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 1 || n > MaxListLimit {
				return fault.Errorf(fault.Invalid, "limit must be a whole number from 1 to %d", MaxListLimit)
			}
			limit = n
		}
		rows, err := List(c.Request().Context(), db, limit)
		if err != nil {
			return ib.Classify(err)
		}
		return c.JSON(http.StatusOK, map[string][]Row{"entries": rows})
	})
}

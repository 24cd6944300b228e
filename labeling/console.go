package labeling

import (
	"encoding/json"
	"html/template"
	"net/url"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/console"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
)

// ConsoleConfig is what labeling's console shows beyond the outbox.
type ConsoleConfig struct {
	Transport string
	// BillingConsoleURL is CONSOLE_BILLING_URL: a link to billing's console, none when empty.
	BillingConsoleURL string
	// TraceURL is CONSOLE_TRACE_URL: a trace viewer's URL with {trace} for the trace id, none when empty.
	TraceURL string
}

// ConsoleModule serves labeling's operator console under /console/ on the
// app's echo instance, over the outbox store and the database, behind the
// operator credential of the app's *auth.Verifier (nil when AUTH_DISABLED: open
// on loopback only). It needs a ConsoleConfig, sqldb.DB, outbox.Store,
// *auth.Verifier and *echo.Echo.
var ConsoleModule = fx.Invoke(func(e *echo.Echo, cfg ConsoleConfig, db sqldb.DB, store outbox.Store, v *auth.Verifier) error {
	c, err := NewConsole(cfg, db, store, v)
	if err != nil {
		return err
	}
	c.Register(e)
	return nil
})

// Console is labeling's operator pages: its outbox's (console.Outbox at
// /console/: the overview, the pending and failed rows, one row, and
// requeue, delete and fail now behind a confirmation).
type Console struct {
	ui     *console.Console
	outbox *console.Outbox
}

// NewConsole returns labeling's console over db and store, behind verifier's
// operator credential (nil: AUTH_DISABLED, loopback only).
func NewConsole(cfg ConsoleConfig, db sqldb.DB, store outbox.Store, verifier *auth.Verifier) (*Console, error) {
	info := console.Info{Service: "labeling", Version: console.Version(), Transport: cfg.Transport, Database: string(db.Dialect()), Ready: db.Ping}
	if cfg.BillingConsoleURL != "" {
		info.Links = append(info.Links, console.Link{Name: "Billing console", URL: cfg.BillingConsoleURL})
	}
	info.Links = append(info.Links, console.Link{Name: "Pending rows", URL: "/console/pending"}, console.Link{Name: "Failed rows", URL: "/console/failed"})
	// No pages of its own: the outbox's are infra/console's, shared with billing.
	ui, err := console.New(info, verifier, nil, nil)
	if err != nil {
		return nil, err
	}
	ob := console.NewOutbox(ui, console.OutboxConfig{Peer: "billing", Subscriber: "billing", TraceURL: cfg.TraceURL, Remedy: billingRemedy(cfg.BillingConsoleURL)}, db, store)
	return &Console{ui: ui, outbox: ob}, nil
}

// Register adds the console's routes to e.
func (c *Console) Register(e *echo.Echo) {
	c.outbox.Register(c.ui.Group(e))
}

// billingRemedy is what to do with an event billing refused as too old: see
// whether it was applied in the org's quota, on billing's console
// (CONSOLE_BILLING_URL, its quota lookup ?org=) when it is set.
func billingRemedy(billingConsole string) func(console.OutboxRow, console.Refusal) (console.Remedy, bool) {
	return func(row console.OutboxRow, r console.Refusal) (console.Remedy, bool) {
		if r.Kind != console.RefusedTooOld {
			return console.Remedy{}, false
		}
		rem := console.Remedy{Text: "Billing never applies it. Check the org's quota on billing: if this event's change is missing from it, correct the count by hand, then delete this row."}
		var p struct {
			OrgID uuid.UUID `json:"orgId"`
		}
		if billingConsole == "" || json.Unmarshal([]byte(row.Payload), &p) != nil || p.OrgID == uuid.Nil {
			return rem, true
		}
		u, err := url.Parse(billingConsole)
		if err != nil {
			return rem, true
		}
		u.RawQuery = url.Values{"org": {p.OrgID.String()}}.Encode()
		rem.Link = template.URL(u.String()) //nolint:gosec // CONSOLE_BILLING_URL (an http(s) URL, checked at start) and an escaped query
		rem.LinkText = "The org's quota on billing's console"
		return rem, true
	}
}

package billing

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/console"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
)

//go:embed consolepages/*.html
var consolePages embed.FS

// NATSReplayer replays terminated NATS messages of billing_nats_failed, named
// by record id (billing_nats_failed.id, as `billing nats replay ID` takes; nil
// ids: all). It reports how many it replayed of how
// many it was asked for. The console shows replay buttons only when
// ConsoleConfig.Replayer is set.
type NATSReplayer interface {
	Replay(ctx context.Context, ids []int64) (replayed, total int, err error)
}

// ConsoleConfig is what billing's console shows and may do.
type ConsoleConfig struct {
	Transport string
	// LabelingConsoleURL (CONSOLE_LABELING_URL) links to labeling's console; none when empty.
	LabelingConsoleURL string
	// Replayer replays NATS records; nil hides replay unless ReplayKeys is set.
	Replayer NATSReplayer
	// ReplayKeys, when set and Replayer is nil, makes ConsoleModule replay with
	// the app's Service under these keys (a KeyReplayer).
	ReplayKeys [][]byte
	// Outbox is the store of billing's outbox (billing_outbox_events), shown
	// at /console/outbox/; nil: NewConsole builds it on db.
	Outbox outbox.Store
}

// KeyReplayer is the NATSReplayer of a Service: ReplayNATSFailed under Keys
// (EVENTS_TOKEN, then EVENTS_TOKEN_PREVIOUS when set), the check and apply
// that `billing nats replay` runs, so the console's replay is the command's.
type KeyReplayer struct {
	Service *Service
	Keys    [][]byte
}

// Replay implements NATSReplayer: it applies each record that verifies, once.
func (r KeyReplayer) Replay(ctx context.Context, ids []int64) (replayed, total int, err error) {
	rep, err := r.Service.ReplayNATSFailed(ctx, r.Keys, ids)
	return rep.Replayed, rep.Records, err
}

// ConsoleModule serves billing's operator console under /console/ behind the
// app's *auth.Verifier's operator credential (nil: AUTH_DISABLED, loopback only).
var ConsoleModule = fx.Invoke(func(e *echo.Echo, cfg ConsoleConfig, db sqldb.DB, svc *Service, v *auth.Verifier) error {
	if cfg.Replayer == nil && len(cfg.ReplayKeys) > 0 {
		cfg.Replayer = KeyReplayer{Service: svc, Keys: cfg.ReplayKeys}
	}
	c, err := NewConsole(cfg, db, svc, v)
	if err != nil {
		return err
	}
	c.Register(e)
	return nil
})

// Console is billing's operator pages: a quota lookup, the NATS records, and
// its outbox's (console.Outbox at /console/outbox/: the QuotaChanged rows and
// the provider's answers, with requeue, delete and fail now), the same pages
// as labeling's.
type Console struct {
	cfg    ConsoleConfig
	db     sqldb.DB
	svc    *Service
	ui     *console.Console
	outbox *console.Outbox
}

// NewConsole returns billing's console.
func NewConsole(cfg ConsoleConfig, db sqldb.DB, svc *Service, verifier *auth.Verifier) (*Console, error) {
	info := console.Info{Service: "billing", Version: console.Version(), Transport: cfg.Transport, Database: string(db.Dialect()), Ready: db.Ping}
	if cfg.LabelingConsoleURL != "" {
		info.Links = append(info.Links, console.Link{Name: "Labeling console", URL: cfg.LabelingConsoleURL})
	}
	info.Links = append(info.Links,
		console.Link{Name: "Outbox", URL: "/console/outbox/"},
		console.Link{Name: "Pending rows", URL: "/console/outbox/pending"},
		console.Link{Name: "Failed rows", URL: "/console/outbox/failed"},
		console.Link{Name: "NATS records", URL: "/console/nats"})
	pages, err := fs.Sub(consolePages, "consolepages")
	if err != nil {
		return nil, err
	}
	ui, err := console.New(info, verifier, pages, template.FuncMap{
		"ms": func(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.RFC3339Nano) },
	})
	if err != nil {
		return nil, err
	}
	store := cfg.Outbox
	if store == nil {
		store = outbox.NewStore(db, outbox.WithTable(OutboxTable))
	}
	ob := console.NewOutbox(ui, console.OutboxConfig{Path: "/outbox", Peer: "the provider", Subscriber: "provider", Remedy: providerRemedy}, db, store)
	return &Console{cfg: cfg, db: db, svc: svc, ui: ui, outbox: ob}, nil
}

// providerRemedy is what to do with a QuotaChanged row the provider refused
// for good: a later row of the same org carries the org's newer count (the
// provider keeps the highest version), so the fix is the org's quota, linked
// on this console, and then deleting the row.
func providerRemedy(row console.OutboxRow, r console.Refusal) (console.Remedy, bool) {
	if r.Kind != console.RefusedRequest {
		return console.Remedy{}, false
	}
	rem := console.Remedy{Text: "The provider keeps each org's highest version: the org's next quota change sends its count again. Check the org's count below; once a later row of the org is processed (or the provider is fixed and this row requeued), delete this row."}
	var q QuotaChanged
	if json.Unmarshal([]byte(row.Payload), &q) != nil || q.OrgID == uuid.Nil {
		return rem, true
	}
	rem.Link = template.URL("/console/?" + url.Values{"org": {q.OrgID.String()}}.Encode()) //nolint:gosec // a fixed path and an escaped query
	rem.LinkText = "The org's quota"
	return rem, true
}

// Register adds the console's routes to e.
func (c *Console) Register(e *echo.Echo) {
	g := c.ui.Group(e)
	g.GET("/", c.quota)
	g.GET("/nats", c.nats)
	c.outbox.Register(g)
	if c.cfg.Replayer != nil {
		g.POST("/nats/confirm", c.confirm)
		g.POST("/nats/replay", c.replay)
	}
}

type quotaData struct {
	Org   string
	Quota *Quota
	Bad   bool
}

func (c *Console) quota(ec echo.Context) error {
	d := quotaData{Org: ec.QueryParam("org")}
	if d.Org == "" {
		return c.ui.Render(ec, http.StatusOK, "quota", "Quota lookup", d)
	}
	org, err := ParseOrgID(d.Org)
	if err != nil {
		d.Bad = true
		return c.ui.Render(ec, http.StatusBadRequest, "quota", "Quota lookup", d)
	}
	q, err := c.svc.Quota(ec.Request().Context(), org)
	if err != nil {
		return c.fail(ec, err)
	}
	d.Quota = &q
	return c.ui.Render(ec, http.StatusOK, "quota", "Quota lookup", d)
}

// natsShown is the most NATS records a page lists.
const natsShown = 200

type natsData struct {
	Rows []inbox.NATSFailed
	// Total is the table's record count (its tally, no scan).
	Total int64
	// After is the page's cursor (the id its records follow; 0: the first
	// page), Next the next page's (0: none).
	After, Next int64
	Replay      bool
}

// nats lists one page of billing_nats_failed: the natsShown records after
// the id ?after= (0: the first), read by keyset without their payloads, so a
// page costs the same whatever the table holds.
func (c *Console) nats(ec echo.Context) error {
	var after int64
	if a := ec.QueryParam("after"); a != "" {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || n < 0 {
			return c.fail(ec, errBadCursor)
		}
		after = n
	}
	ctx := ec.Request().Context()
	rows, err := PageNATSFailed(ctx, c.db, after, natsShown+1)
	if err != nil {
		return c.fail(ec, err)
	}
	total, _, err := NATSFailedSize(ctx, c.db)
	if err != nil {
		return c.fail(ec, err)
	}
	d := natsData{Total: total, After: after, Replay: c.cfg.Replayer != nil}
	if len(rows) > natsShown {
		rows = rows[:natsShown]
		d.Next = rows[natsShown-1].ID
	}
	d.Rows = rows
	return c.ui.Render(ec, http.StatusOK, "nats", "NATS records (billing_nats_failed)", d)
}

type replayData struct {
	IDs   []int64
	All   bool
	Count int
}

func seqs(ec echo.Context) ([]int64, bool, error) {
	if ec.FormValue("all") == "true" {
		return nil, true, nil
	}
	form, _ := ec.FormParams()
	var ids []int64
	for _, s := range form["id"] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return nil, false, errBadConsoleForm
		}
		ids = append(ids, n)
	}
	if len(ids) == 0 {
		return nil, false, errBadConsoleForm
	}
	return ids, false, nil
}

var (
	errBadConsoleForm = errors.New("select at least one record by its id")
	errBadCursor      = errors.New("after must be a record id (a non-negative integer)")
)

func (c *Console) confirm(ec echo.Context) error {
	ids, all, err := seqs(ec)
	if err != nil {
		return c.fail(ec, err)
	}
	n := len(ids)
	if all {
		total, _, err := NATSFailedSize(ec.Request().Context(), c.db)
		if err != nil {
			return c.fail(ec, err)
		}
		n = int(total)
	}
	return c.ui.Render(ec, http.StatusOK, "replayconfirm", "Confirm replay", replayData{IDs: ids, All: all, Count: n})
}

func (c *Console) replay(ec echo.Context) error {
	ids, _, err := seqs(ec)
	if err != nil {
		return c.fail(ec, err)
	}
	replayed, total, err := c.cfg.Replayer.Replay(ec.Request().Context(), ids)
	if err != nil {
		return c.fail(ec, err)
	}
	return c.ui.Render(ec, http.StatusOK, "message", "Replayed", fmt.Sprintf("Replayed %d of %d record(s).", replayed, total))
}

func (c *Console) fail(ec echo.Context, err error) error {
	if errors.Is(err, errBadConsoleForm) || errors.Is(err, errBadCursor) {
		return c.ui.Render(ec, http.StatusBadRequest, "message", "Bad request", "Nothing changed: "+err.Error()+".")
	}
	if c.db.Unavailable(err) || errors.Is(err, context.DeadlineExceeded) {
		return c.ui.Render(ec, http.StatusServiceUnavailable, "message", "Database unavailable", "The database did not answer; try again.")
	}
	ec.Logger().Error("console: ", err)
	return c.ui.Render(ec, http.StatusInternalServerError, "message", "Internal error", "The console could not read the database; the service's log says why.")
}

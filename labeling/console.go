package labeling

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/console"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
)

//go:embed consolepages/*.html
var consolePages embed.FS

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

// Console is labeling's operator pages: the outbox overview, the failed rows,
// one row, and requeue and delete behind a confirmation.
type Console struct {
	cfg   ConsoleConfig
	q     consoleQueries
	store outbox.Store
	ui    *console.Console
}

// NewConsole returns labeling's console over db and store, behind verifier's
// operator credential (nil: AUTH_DISABLED, loopback only).
func NewConsole(cfg ConsoleConfig, db sqldb.DB, store outbox.Store, verifier *auth.Verifier) (*Console, error) {
	info := console.Info{Service: "labeling", Version: console.Version(), Transport: cfg.Transport, Database: string(db.Dialect()), Ready: db.Ping}
	if cfg.BillingConsoleURL != "" {
		info.Links = append(info.Links, console.Link{Name: "Billing console", URL: cfg.BillingConsoleURL})
	}
	info.Links = append(info.Links, console.Link{Name: "Failed rows", URL: "/console/failed"})
	pages, err := fs.Sub(consolePages, "consolepages")
	if err != nil {
		return nil, err
	}
	ui, err := console.New(info, verifier, pages, template.FuncMap{
		"time": func(ms int64) string { return FormatTime(ms) },
		"age":  func(ms int64) string { return time.Since(time.UnixMilli(ms)).Truncate(time.Second).String() },
	})
	if err != nil {
		return nil, err
	}
	return &Console{cfg: cfg, q: newConsoleQueries(db), store: store, ui: ui}, nil
}

// Register adds the console's routes to e.
func (c *Console) Register(e *echo.Echo) {
	g := c.ui.Group(e)
	g.GET("/", c.overview)
	g.GET("/failed", c.failed)
	g.GET("/rows/:id", c.row)
	g.POST("/confirm", c.confirm)
	g.POST("/act", c.act)
}

// overviewData is the overview page.
type overviewData struct {
	Counts
	Chart template.HTML
}

func (c *Console) overview(ec echo.Context) error {
	ctx := ec.Request().Context()
	counts, err := c.q.counts(ctx, time.Now().UnixMilli())
	if err != nil {
		return c.fail(ec, err)
	}
	rate, err := c.q.processedPerMinute(ctx, time.Now())
	if err != nil {
		return c.fail(ec, err)
	}
	title := "Processed per minute, last hour"
	var total int64
	for _, n := range rate {
		total += n
	}
	if total >= rateCap {
		title += fmt.Sprintf(" (the newest %d rows only: older minutes are incomplete)", rateCap)
	}
	return c.ui.Render(ec, http.StatusOK, "overview", "Outbox overview", overviewData{Counts: counts, Chart: console.BarChart(title, rate)})
}

// failedData is the failed rows page.
type failedData struct {
	Tag, Error string
	Rows       []ConsoleRow
	Next       template.URL // the next page, empty on the last (built here from escaped values)
}

func (c *Console) failed(ec echo.Context) error {
	f := failedFilter{Tag: ec.QueryParam("tag"), Error: ec.QueryParam("error")}
	if after := ec.QueryParam("after"); after != "" {
		at, id, ok := parseCursor(after)
		if !ok {
			return c.ui.Render(ec, http.StatusBadRequest, "message", "Bad request", "The page cursor is not valid; start from the first page.")
		}
		f.AfterAt, f.AfterID = at, &id
	}
	rows, err := c.q.failed(ec.Request().Context(), f, pageSize+1)
	if err != nil {
		return c.fail(ec, err)
	}
	d := failedData{Tag: f.Tag, Error: f.Error, Rows: rows}
	if len(rows) > pageSize {
		d.Rows = rows[:pageSize]
		last := d.Rows[pageSize-1]
		v := url.Values{}
		if f.Tag != "" {
			v.Set("tag", f.Tag)
		}
		if f.Error != "" {
			v.Set("error", f.Error)
		}
		v.Set("after", strconv.FormatInt(*last.FailedAt, 10)+"_"+last.ID.String())
		d.Next = template.URL("/console/failed?" + v.Encode()) //nolint:gosec // a fixed path and url.Values' escaped query
	}
	return c.ui.Render(ec, http.StatusOK, "failed", "Failed rows", d)
}

// pageSize is the rows of one page of the failed list.
const pageSize = 50

func parseCursor(s string) (int64, uuid.UUID, bool) {
	at, id, ok := strings.Cut(s, "_")
	if !ok {
		return 0, uuid.Nil, false
	}
	n, err := strconv.ParseInt(at, 10, 64)
	if err != nil {
		return 0, uuid.Nil, false
	}
	u, err := uuid.Parse(id)
	if err != nil {
		return 0, uuid.Nil, false
	}
	return n, u, true
}

// rowData is one row's page.
type rowData struct {
	Row      ConsoleRow
	TraceID  string
	TraceURL string
}

func (c *Console) row(ec echo.Context) error {
	id, err := uuid.Parse(ec.Param("id"))
	if err != nil {
		return c.ui.Render(ec, http.StatusNotFound, "message", "Not found", "No outbox row has that id.")
	}
	r, err := c.q.row(ec.Request().Context(), id)
	if errors.Is(err, errNoRow) {
		return c.ui.Render(ec, http.StatusNotFound, "message", "Not found", "No outbox row has that id (it may have been deleted by retention).")
	}
	if err != nil {
		return c.fail(ec, err)
	}
	d := rowData{Row: r, TraceID: traceID(r.Trace)}
	if d.TraceID != "" && c.cfg.TraceURL != "" {
		d.TraceURL = strings.ReplaceAll(c.cfg.TraceURL, "{trace}", url.PathEscape(d.TraceID))
	}
	return c.ui.Render(ec, http.StatusOK, "row", "Outbox row "+id.String(), d)
}

// confirmData is the confirmation page of an action.
type confirmData struct {
	Action string
	IDs    []uuid.UUID
	Tag    string
	Count  int // how many of the ids are failed rows now: what the action touches
}

// maxAction is the most rows one console action touches (a tag with more
// failed rows takes several).
const maxAction = 1000

// targets reads the rows an action names: ids from the form, or the failed
// rows of tag (at most maxAction), keeping only the failed ones.
func (c *Console) targets(ec echo.Context) (action, tag string, ids []uuid.UUID, err error) {
	action = ec.FormValue("action")
	if action != "requeue" && action != "delete" {
		return "", "", nil, errBadForm("choose requeue or delete")
	}
	form, _ := ec.FormParams()
	for _, s := range form["id"] {
		u, perr := uuid.Parse(s)
		if perr != nil {
			return "", "", nil, errBadForm("an id is not a UUID")
		}
		ids = append(ids, u)
	}
	tag = ec.FormValue("tag")
	if len(ids) > maxAction {
		return "", "", nil, errBadForm(fmt.Sprintf("at most %d rows per action", maxAction))
	}
	ctx := ec.Request().Context()
	if len(ids) == 0 && tag != "" {
		ids, err = c.q.failedIDsOfTag(ctx, tag, maxAction)
		return action, tag, ids, err
	}
	if len(ids) == 0 {
		return "", "", nil, errBadForm("select at least one row")
	}
	ids, err = c.q.failedAmong(ctx, ids)
	return action, "", ids, err
}

type errBadForm string

func (e errBadForm) Error() string { return string(e) }

func (c *Console) confirm(ec echo.Context) error {
	action, tag, ids, err := c.targets(ec)
	if err != nil {
		return c.fail(ec, err)
	}
	return c.ui.Render(ec, http.StatusOK, "confirm", "Confirm "+action, confirmData{Action: action, IDs: ids, Tag: tag, Count: len(ids)})
}

func (c *Console) act(ec echo.Context) error {
	action, _, ids, err := c.targets(ec)
	if err != nil {
		return c.fail(ec, err)
	}
	ctx := ec.Request().Context()
	var n int64
	if action == "requeue" {
		n, err = outbox.Requeue(ctx, c.store, ids)
	} else {
		// Only failed rows reach here (targets), so Delete's pending refusal
		// applies only to a row requeued in between: it then deletes nothing.
		n, err = outbox.Delete(ctx, c.store, ids)
	}
	if errors.Is(err, outbox.ErrPending) {
		return c.ui.Render(ec, http.StatusConflict, "message", "Nothing deleted", "A selected row is pending again (requeued meanwhile); nothing was deleted.")
	}
	if err != nil {
		return c.fail(ec, err)
	}
	verb := map[string]string{"requeue": "Requeued", "delete": "Deleted"}[action]
	return c.ui.Render(ec, http.StatusOK, "message", verb, fmt.Sprintf("%s %d row(s).", verb, n))
}

// fail renders err: a bad form is a 400 naming the mistake; anything else a 500
// or 503 that leaks nothing.
func (c *Console) fail(ec echo.Context, err error) error {
	var bad errBadForm
	if errors.As(err, &bad) {
		return c.ui.Render(ec, http.StatusBadRequest, "message", "Bad request", "Nothing changed: "+string(bad)+".")
	}
	if c.q.db.Unavailable(err) || errors.Is(err, context.DeadlineExceeded) {
		return c.ui.Render(ec, http.StatusServiceUnavailable, "message", "Database unavailable", "The database did not answer; try again.")
	}
	ec.Logger().Error("console: ", err)
	return c.ui.Render(ec, http.StatusInternalServerError, "message", "Internal error", "The console could not read the outbox; the service's log says why.")
}

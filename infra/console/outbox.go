package console

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
)

// OutboxConfig is what a service's outbox pages show beyond the table.
type OutboxConfig struct {
	// Path is where the pages live under /console: "" for labeling's (its
	// overview is /console/), "/outbox" for billing's (/console/outbox/).
	Path string
	// Peer names who the relay delivers to ("billing", "the provider"), for
	// the overview's "last answers".
	Peer string
	// Subscriber is how the pages name the subscriber of the table's default
	// rows (subscriber ''): "billing" for labeling's, "provider" for
	// billing's; a fan-out row shows its own name (SUBSCRIBERS).
	Subscriber string
	// TraceURL is a trace viewer's URL with {trace} for the trace id; none when empty.
	TraceURL string
	// Remedy, when set, says what to do instead of a futile requeue of a row
	// refused for good (RefusalOf), in the service's terms: ok false falls
	// back to a general remedy.
	Remedy func(row OutboxRow, r Refusal) (Remedy, bool)
}

// Outbox is the operator pages of one outbox table, the same for every
// service that has one: the overview, the pending and the failed rows (each
// filterable and paged), one row, and requeue, delete and fail now behind a
// confirmation, each running infra/outbox's function, the one behind the
// `outbox` commands.
type Outbox struct {
	cfg   OutboxConfig
	q     outboxQueries
	store outbox.Store
	ui    *Console
}

// NewOutbox returns the outbox pages of store's table (in db) inside ui.
func NewOutbox(ui *Console, cfg OutboxConfig, db sqldb.DB, store outbox.Store) *Outbox {
	return &Outbox{cfg: cfg, q: newOutboxQueries(db, store.Table()), store: store, ui: ui}
}

// Register adds the pages to g, the console's group (Console.Group), under cfg.Path.
func (o *Outbox) Register(g *echo.Group) {
	p := o.cfg.Path
	g.GET(p+"/", o.overview)
	if p != "" {
		g.GET(p, func(ec echo.Context) error { return ec.Redirect(http.StatusMovedPermanently, o.base()+"/") })
	}
	g.GET(p+"/failed", o.list(true))
	g.GET(p+"/pending", o.list(false))
	g.GET(p+"/rows/:id", o.row)
	g.POST(p+"/confirm", o.confirm)
	g.POST(p+"/act", o.act)
}

// base is the pages' path: /console, or /console/outbox.
func (o *Outbox) base() string { return "/console" + o.cfg.Path }

// overviewData is the overview page.
type overviewData struct {
	Counts
	Base          string
	Peer          string
	Chart         template.HTML
	LastProcessed *int64
	Answers       []OutboxRow
}

// answersShown is how many of the peer's last answers the overview lists.
const answersShown = 10

func (o *Outbox) overview(ec echo.Context) error {
	ctx := ec.Request().Context()
	counts, err := o.q.counts(ctx, time.Now().UnixMilli())
	if err != nil {
		return o.fail(ec, err)
	}
	rate, err := o.q.processedPerMinute(ctx, time.Now())
	if err != nil {
		return o.fail(ec, err)
	}
	d := overviewData{Counts: counts, Base: o.base(), Peer: o.cfg.Peer}
	if d.LastProcessed, err = o.q.lastProcessed(ctx); err != nil {
		return o.fail(ec, err)
	}
	if d.Answers, err = o.q.lastAnswers(ctx, answersShown); err != nil {
		return o.fail(ec, err)
	}
	title := "Processed per minute, last hour"
	var total int64
	for _, n := range rate {
		total += n
	}
	if total >= rateCap {
		title += fmt.Sprintf(" (the newest %d rows only: older minutes are incomplete)", rateCap)
	}
	d.Chart = BarChart(title, rate)
	return o.ui.Render(ec, http.StatusOK, "outbox-overview", "Outbox overview ("+o.store.Table()+")", d)
}

// listData is a list page: the failed rows, or the pending ones.
type listData struct {
	Base       string
	Subscriber string // the default rows' subscriber (OutboxConfig.Subscriber)
	Failed     bool
	Tag, Error string
	State      string
	States     []stateOption
	Rows       []listRow
	Next       template.URL // the next page, empty on the last (built here from escaped values)
}

// listRow is a row of a list, with whether a requeue of it would be futile.
type listRow struct {
	OutboxRow
	Refused bool
}

type stateOption struct{ Value, Label string }

// pendingStates are the pending list's state filter.
var pendingStates = []stateOption{
	{"", "any"}, {"ready", "ready now"}, {"inflight", "in flight"}, {"retrying", "waiting for a retry"},
}

// pageSize is the rows of one page of a list.
const pageSize = 50

func (o *Outbox) list(failed bool) echo.HandlerFunc {
	return func(ec echo.Context) error {
		f := listFilter{Failed: failed, Tag: ec.QueryParam("tag"), Error: ec.QueryParam("error")}
		if !failed {
			f.State = ec.QueryParam("state")
			known := false
			for _, s := range pendingStates {
				known = known || s.Value == f.State
			}
			if !known {
				return o.ui.Render(ec, http.StatusBadRequest, "outbox-message", "Bad request", messageData{Base: o.base(), Text: "The state filter is one of ready, inflight, retrying, or none."})
			}
		}
		if after := ec.QueryParam("after"); after != "" {
			at, id, ok := parseCursor(after)
			if !ok {
				return o.ui.Render(ec, http.StatusBadRequest, "outbox-message", "Bad request", messageData{Base: o.base(), Text: "The page cursor is not valid; start from the first page."})
			}
			f.AfterAt, f.AfterID = at, &id
		}
		rows, err := o.q.list(ec.Request().Context(), f, pageSize+1)
		if err != nil {
			return o.fail(ec, err)
		}
		d := listData{Base: o.base(), Subscriber: o.cfg.Subscriber, Failed: failed, Tag: f.Tag, Error: f.Error, State: f.State, States: pendingStates}
		if len(rows) > pageSize {
			rows = rows[:pageSize]
			last := rows[pageSize-1]
			v := url.Values{}
			for k, s := range map[string]string{"tag": f.Tag, "error": f.Error, "state": f.State} {
				if s != "" {
					v.Set(k, s)
				}
			}
			at := last.CreatedAt
			if failed {
				at = *last.FailedAt
			}
			v.Set("after", strconv.FormatInt(at, 10)+"_"+last.ID.String())
			d.Next = template.URL(o.base() + map[bool]string{true: "/failed?", false: "/pending?"}[failed] + v.Encode()) //nolint:gosec // a fixed path and url.Values' escaped query
		}
		for _, r := range rows {
			_, refused := RefusalOf(r.LastError)
			d.Rows = append(d.Rows, listRow{OutboxRow: r, Refused: failed && refused})
		}
		title := "Failed rows"
		if !failed {
			title = "Pending rows"
			for _, s := range pendingStates[1:] {
				if s.Value == f.State {
					title += ": " + s.Label
				}
			}
		}
		return o.ui.Render(ec, http.StatusOK, "outbox-list", title, d)
	}
}

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
	Base       string
	Subscriber string // the default rows' subscriber (OutboxConfig.Subscriber)
	Row        OutboxRow
	TraceID    string
	TraceURL   string
	// Refusal and Remedy: the row was failed by an answer no retry changes,
	// and what to do instead of a requeue; nil otherwise.
	Refusal *Refusal
	Remedy  *Remedy
}

func (o *Outbox) row(ec echo.Context) error {
	id, err := uuid.Parse(ec.Param("id"))
	if err != nil {
		return o.ui.Render(ec, http.StatusNotFound, "outbox-message", "Not found", messageData{Base: o.base(), Text: "No outbox row has that id."})
	}
	r, err := o.q.row(ec.Request().Context(), id)
	if errors.Is(err, errNoRow) {
		return o.ui.Render(ec, http.StatusNotFound, "outbox-message", "Not found", messageData{Base: o.base(), Text: "No outbox row has that id (it may have been deleted by retention)."})
	}
	if err != nil {
		return o.fail(ec, err)
	}
	d := rowData{Base: o.base(), Subscriber: o.cfg.Subscriber, Row: r, TraceID: traceID(r.Trace)}
	if d.TraceID != "" && o.cfg.TraceURL != "" {
		d.TraceURL = strings.ReplaceAll(o.cfg.TraceURL, "{trace}", url.PathEscape(d.TraceID))
	}
	if ref, ok := RefusalOf(r.LastError); ok && r.FailedAt != nil {
		rem := o.remedy(r, ref)
		d.Refusal, d.Remedy = &ref, &rem
	}
	return o.ui.Render(ec, http.StatusOK, "outbox-row", "Outbox row "+id.String(), d)
}

// remedy is the service's remedy for a refused row, else the general one.
func (o *Outbox) remedy(r OutboxRow, ref Refusal) Remedy {
	if o.cfg.Remedy != nil {
		if rem, ok := o.cfg.Remedy(r, ref); ok {
			return rem
		}
	}
	return defaultRemedy(ref)
}

// confirmData is the confirmation page of an action.
type confirmData struct {
	Base   string
	Action string
	IDs    []uuid.UUID
	Tag    string
	Count  int // how many of the ids are in the state the action needs now: what it touches
	// Refused is how many of a requeue's rows a non-retryable answer failed:
	// each will fail again.
	Refused int
}

// State is the state of the rows the action touches.
func (d confirmData) State() string {
	if d.Action == "fail" {
		return "pending"
	}
	return "failed"
}

// maxAction is the most rows one console action touches (a tag with more
// rows takes several).
const maxAction = 1000

// actions are the console's actions: requeue and delete act on failed rows,
// fail on pending ones.
var actions = map[string]struct {
	onFailed bool
	run      func(context.Context, outbox.Store, []uuid.UUID) (int64, error)
	done     string
}{
	"requeue": {true, outbox.Requeue, "Requeued"},
	"delete":  {true, outbox.Delete, "Deleted"},
	"fail":    {false, outbox.Fail, "Failed"},
}

// targets reads the rows an action names: ids from the form, or the rows of
// tag (at most maxAction), keeping only those in the state the action needs.
func (o *Outbox) targets(ec echo.Context) (action, tag string, rows []target, err error) {
	action = ec.FormValue("action")
	a, ok := actions[action]
	if !ok {
		return "", "", nil, errBadForm("choose requeue, delete or fail")
	}
	form, _ := ec.FormParams()
	var ids []uuid.UUID
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
		rows, err = o.q.ofTag(ctx, a.onFailed, tag, maxAction)
		return action, tag, rows, err
	}
	if len(ids) == 0 {
		return "", "", nil, errBadForm("select at least one row")
	}
	rows, err = o.q.among(ctx, a.onFailed, ids)
	return action, "", rows, err
}

type errBadForm string

func (e errBadForm) Error() string { return string(e) }

func (o *Outbox) confirm(ec echo.Context) error {
	action, tag, rows, err := o.targets(ec)
	if err != nil {
		return o.fail(ec, err)
	}
	d := confirmData{Base: o.base(), Action: action, Tag: tag, Count: len(rows)}
	for _, r := range rows {
		d.IDs = append(d.IDs, r.ID)
		if _, refused := RefusalOf(r.LastError); refused && action == "requeue" {
			d.Refused++
		}
	}
	return o.ui.Render(ec, http.StatusOK, "outbox-confirm", "Confirm "+action, d)
}

// messageData is a result or refusal, with the way back.
type messageData struct {
	Base string
	Text string
}

func (o *Outbox) act(ec echo.Context) error {
	action, _, rows, err := o.targets(ec)
	if err != nil {
		return o.fail(ec, err)
	}
	ids := make([]uuid.UUID, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	a := actions[action]
	// Only rows in the action's state reach here (targets); the functions
	// check it again in their own statement, so a row that changed state in
	// between is left alone (Delete refuses it, then deletes nothing).
	n, err := a.run(ec.Request().Context(), o.store, ids)
	if errors.Is(err, outbox.ErrPending) {
		return o.ui.Render(ec, http.StatusConflict, "outbox-message", "Nothing deleted", messageData{Base: o.base(), Text: "A selected row is pending again (requeued meanwhile); nothing was deleted."})
	}
	if err != nil {
		return o.fail(ec, err)
	}
	return o.ui.Render(ec, http.StatusOK, "outbox-message", a.done, messageData{Base: o.base(), Text: fmt.Sprintf("%s %d row(s).", a.done, n)})
}

// fail renders err: a bad form is a 400 naming the mistake; anything else a 500
// or 503 that leaks nothing.
func (o *Outbox) fail(ec echo.Context, err error) error {
	var bad errBadForm
	if errors.As(err, &bad) {
		return o.ui.Render(ec, http.StatusBadRequest, "outbox-message", "Bad request", messageData{Base: o.base(), Text: "Nothing changed: " + string(bad) + "."})
	}
	if o.q.db.Unavailable(err) || errors.Is(err, context.DeadlineExceeded) {
		return o.ui.Render(ec, http.StatusServiceUnavailable, "outbox-message", "Database unavailable", messageData{Base: o.base(), Text: "The database did not answer; try again."})
	}
	ec.Logger().Error("console: ", err)
	return o.ui.Render(ec, http.StatusInternalServerError, "outbox-message", "Internal error", messageData{Base: o.base(), Text: "The console could not read the outbox; the service's log says why."})
}

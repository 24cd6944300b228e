package billing_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

// recordingReplayer is the replay seam's other side in these tests: it records
// the stream sequences the console asked for.
type recordingReplayer struct {
	mu    sync.Mutex
	calls [][]int64
}

func (r *recordingReplayer) Replay(_ context.Context, ids []int64) (int, int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls = append(r.calls, ids)
	return len(ids), len(ids), nil
}

func consoleOn(t *testing.T, db *dbtest.DB, replayer billing.NATSReplayer) (*echo.Echo, *billing.Service) {
	t.Helper()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := billing.NewService(db.DB, logger)
	e := web.New(logger, db.DB)
	cfg := billing.ConsoleConfig{Transport: "http", LabelingConsoleURL: "http://localhost:8080/console/"}
	if replayer != nil {
		cfg.Replayer = replayer
	}
	c, err := billing.NewConsole(cfg, db.DB, svc, nil)
	require.NoError(t, err)
	c.Register(e)
	return e, svc
}

func consoleDo(e *echo.Echo, method, path string, form url.Values, csrf string) *httptest.ResponseRecorder {
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req := httptest.NewRequest(method, path, body)
	req.RemoteAddr = "127.0.0.1:40000"
	if form != nil {
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationForm)
	}
	if csrf != "" {
		req.AddCookie(&http.Cookie{Name: "console_csrf", Value: csrf})
	}
	rec := httptest.NewRecorder()
	e.ServeHTTP(rec, req)
	return rec
}

func TestBillingConsole(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := dbtest.New(t, d, migrations.Billing)
		replayer := &recordingReplayer{}
		e, svc := consoleOn(t, db, replayer)
		org := uuid.New()
		_, err := svc.Apply(context.Background(), billing.Event{ID: uuid.Must(uuid.NewV7()), Type: billing.RuleActivated, OccurredAt: 1, Value: billing.Effect{OrgID: org, Delta: 1}})
		require.NoError(t, err)
		require.NoError(t, svc.InTx(context.Background(), func(tx billing.Tx) error {
			return tx.InsertNATSFailed(context.Background(), inbox.NATSFailed{
				StreamSeq: 7, StoredAt: 1, Subject: "labeling.events.RuleActivated", MsgID: "m-7",
				Payload: []byte(`{}`), Reason: `<img src=x onerror=alert(1)>`, Deliveries: 3, FailedAt: time.Now().UnixMilli(),
			})
		}))

		t.Run("the quota lookup shows an org's active rules, and the header the service's state", func(t *testing.T) {
			rec := consoleDo(e, http.MethodGet, "/console/?org="+org.String(), nil, "")
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			body := rec.Body.String()
			require.Contains(t, body, `<td class="num" id="active-rules">1</td>`)
			require.Contains(t, body, "database "+string(d))
			require.Contains(t, body, `<span id="readyz">ready (200)</span>`)
			require.Contains(t, body, `href="http://localhost:8080/console/"`)
			require.Equal(t, "DENY", rec.Header().Get("X-Frame-Options"))
			require.Equal(t, http.StatusBadRequest, consoleDo(e, http.MethodGet, "/console/?org=acme", nil, "").Code)
		})

		t.Run("the NATS records are listed with their reasons as text", func(t *testing.T) {
			body := consoleDo(e, http.MethodGet, "/console/nats", nil, "").Body.String()
			require.Contains(t, body, "m-7")
			require.Contains(t, body, "&lt;img src=x onerror=alert(1)&gt;")
			require.NotContains(t, body, "<img src=x")
			require.Contains(t, body, "Replay selected")
		})

		t.Run("replay goes through a confirmation to the replayer with the confirmed records", func(t *testing.T) {
			const csrf = "test-csrf"
			rec := consoleDo(e, http.MethodPost, "/console/nats/confirm", url.Values{"csrf": {csrf}, "id": {"7"}}, csrf)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), "<strong>1</strong> record(s)")
			require.Empty(t, replayer.calls, "the confirmation replays nothing")
			require.Equal(t, http.StatusForbidden, consoleDo(e, http.MethodPost, "/console/nats/replay", url.Values{"id": {"7"}}, "").Code)
			rec = consoleDo(e, http.MethodPost, "/console/nats/replay", url.Values{"csrf": {csrf}, "id": {"7"}}, csrf)
			require.Contains(t, rec.Body.String(), "Replayed 1 of 1 record(s).")
			rec = consoleDo(e, http.MethodPost, "/console/nats/replay", url.Values{"csrf": {csrf}, "all": {"true"}}, csrf)
			require.Equal(t, http.StatusOK, rec.Code)
			require.Equal(t, [][]int64{{7}, nil}, replayer.calls)
			require.Equal(t, http.StatusBadRequest, consoleDo(e, http.MethodPost, "/console/nats/replay", url.Values{"csrf": {csrf}, "id": {"x"}}, csrf).Code)
		})

		t.Run("without a replayer no replay is offered or served", func(t *testing.T) {
			e2, _ := consoleOn(t, db, nil)
			body := consoleDo(e2, http.MethodGet, "/console/nats", nil, "").Body.String()
			require.Contains(t, body, "m-7")
			require.NotContains(t, body, "Replay")
			const csrf = "test-csrf"
			require.NotEqual(t, http.StatusOK, consoleDo(e2, http.MethodPost, "/console/nats/replay", url.Values{"csrf": {csrf}, "id": {"7"}}, csrf).Code)
		})
	})
}

// TestBillingConsoleNATSPages: the NATS records page lists a page of records
// after a cursor, read without their payloads, whatever the table holds.
func TestBillingConsoleNATSPages(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := dbtest.New(t, d, migrations.Billing)
		// 450 records, ids 1 to 450 (a fresh table), in one statement.
		db.Exec(t, `WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 450)
			INSERT INTO billing_nats_failed (stream_seq, stored_at, subject, msg_id, payload, reason, deliveries, failed_at, signature)
			SELECT i, 1, 'labeling.events.RuleActivated', CAST('m-' || i AS BYTEA), '{}', 'r', 1, 0, ''  FROM n`)
		// A listing that selected the payload or the signature would fail
		// now: the page must read neither.
		db.Exec(t, `ALTER TABLE billing_nats_failed RENAME COLUMN payload TO payload_unread`)
		db.Exec(t, `ALTER TABLE billing_nats_failed RENAME COLUMN signature TO signature_unread`)
		e, _ := consoleOn(t, db, &recordingReplayer{})
		listed := regexp.MustCompile(`name="id" value="(\d+)"`)
		page := func(path string) (ids []string, body string) {
			t.Helper()
			rec := consoleDo(e, http.MethodGet, path, nil, "")
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			for _, m := range listed.FindAllStringSubmatch(rec.Body.String(), -1) {
				ids = append(ids, m[1])
			}
			return ids, rec.Body.String()
		}
		seq := func(from, to int) []string {
			var out []string
			for i := from; i <= to; i++ {
				out = append(out, strconv.Itoa(i))
			}
			return out
		}

		t.Run("pages of 200 after a cursor, read without payloads, with the count from the tally", func(t *testing.T) {
			ids, body := page("/console/nats")
			require.Equal(t, seq(1, 200), ids, "the first page: the oldest 200")
			require.Contains(t, body, "450 record(s)")
			require.Contains(t, body, `href="/console/nats?after=200"`)
			ids, body = page("/console/nats?after=200")
			require.Equal(t, seq(201, 400), ids)
			require.Contains(t, body, `href="/console/nats?after=400"`)
			ids, body = page("/console/nats?after=400")
			require.Equal(t, seq(401, 450), ids, "the last page")
			require.NotContains(t, body, "Next page")
			ids, _ = page("/console/nats?after=450")
			require.Empty(t, ids)
			for _, bad := range []string{"x", "-1"} {
				require.Equal(t, http.StatusBadRequest, consoleDo(e, http.MethodGet, "/console/nats?after="+bad, nil, "").Code)
			}
		})
	})
}

// TestBillingConsoleOutbox: billing's console shows its own outbox
// (billing_outbox_events) at /console/outbox/ with labeling's pages and
// actions, and the provider's last answers.
func TestBillingConsoleOutbox(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := dbtest.New(t, d, migrations.Billing)
		e, svc := consoleOn(t, db, nil)
		org := uuid.New()
		_, err := svc.Apply(context.Background(), billing.Event{ID: uuid.Must(uuid.NewV7()), Type: billing.RuleActivated, OccurredAt: 1, Value: billing.Effect{OrgID: org, Delta: 1}})
		require.NoError(t, err)
		var pending string
		require.NoError(t, db.QueryRow(`SELECT id FROM billing_outbox_events`).Scan(&pending))
		now := time.Now().UnixMilli()
		refused, retrying := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
		payload := `{"orgId":"` + org.String() + `","activeRules":1,"sourceEventId":"` + uuid.NewString() + `","version":1}`
		db.Exec(t, `INSERT INTO billing_outbox_events (id, event_tag, payload, created_at, available_at, attempts, failed_at, last_error)
			VALUES ($1, 'QuotaChanged', $3, $4, $4, 1, $4, 'permanent: call provider for QuotaChanged x: provider answered 410 Gone: no such tenant'),
			       ($2, 'QuotaChanged', $3, $4, $5, 2, NULL, 'call provider for QuotaChanged y: provider answered 503 Service Unavailable: busy')`,
			refused.String(), retrying.String(), payload, now, now+time.Hour.Milliseconds())
		get := func(path string) string {
			rec := consoleDo(e, http.MethodGet, path, nil, "")
			require.Equal(t, http.StatusOK, rec.Code, path+": "+rec.Body.String())
			return rec.Body.String()
		}

		t.Run("the overview counts its rows, each a link, and shows the provider's last answers", func(t *testing.T) {
			body := get("/console/outbox/")
			require.Contains(t, body, "billing_outbox_events")
			require.Contains(t, body, `<a href="/console/outbox/pending">2<`)
			require.Contains(t, body, `<a href="/console/outbox/pending?state=retrying">1<`)
			require.Contains(t, body, `<a href="/console/outbox/failed">1<`)
			require.Contains(t, body, "Last answers from the provider")
			require.Contains(t, body, "provider answered 410 Gone: no such tenant")
			require.Contains(t, body, "provider answered 503 Service Unavailable: busy")
			require.Contains(t, get("/console/"), `href="/console/outbox/"`, "the header links to it")
		})

		t.Run("the pending and failed rows are listed apart", func(t *testing.T) {
			body := get("/console/outbox/pending")
			require.Contains(t, body, pending)
			require.Contains(t, body, retrying.String())
			require.NotContains(t, body, refused.String())
			body = get("/console/outbox/failed")
			require.Contains(t, body, refused.String())
			require.NotContains(t, body, pending)
		})

		t.Run("a row the provider refused for good links the org's quota", func(t *testing.T) {
			body := get("/console/outbox/rows/" + refused.String())
			require.Contains(t, body, "Refused for good")
			require.Contains(t, body, `<a href="/console/?org=`+org.String()+`">The org&#39;s quota</a>`)
		})

		t.Run("fail now dead-letters a pending QuotaChanged row", func(t *testing.T) {
			const csrf = "test-csrf"
			form := url.Values{"csrf": {csrf}, "action": {"fail"}, "id": {pending}}
			rec := consoleDo(e, http.MethodPost, "/console/outbox/confirm", form, csrf)
			require.Contains(t, rec.Body.String(), "This will fail now <strong>1</strong> pending row(s).")
			require.Contains(t, rec.Body.String(), `action="/console/outbox/act"`)
			rec = consoleDo(e, http.MethodPost, "/console/outbox/act", form, csrf)
			require.Contains(t, rec.Body.String(), "Failed 1 row(s).")
			require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM billing_outbox_events WHERE id = $1 AND failed_at IS NOT NULL`, pending))
		})
	})
}

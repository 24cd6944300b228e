package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/internal/testsupport/authtest"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// chromium is the path of the Chromium binary; the test fails (never skips)
// without one, saying how to install it.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium for the browser test: install it (Debian: apt-get update && apt-get install -y chromium); .ci/run does")
	return ""
}

// ready waits until base's /readyz answers 200.
func ready(t *testing.T, client *http.Client, base string) {
	t.Helper()
	require.Eventually(t, func() bool {
		resp, err := client.Get(base + "/readyz")
		if err != nil {
			return false
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 60*time.Second, 50*time.Millisecond, "%s/readyz", base)
}

// The viewport of the browser, and so of the docs' screenshots.
const viewportW, viewportH = 1200, 800

// TestConsoleInBrowser drives headless Chromium against the real binaries: a
// dead letter is found on the failed page, opened, requeued through the
// confirmation, and billing's console then shows the org's quota changed; a
// row retrying for ever is found among the pending rows and failed now; a row
// billing refused as too old says what to do instead (the org's quota on
// billing's console) and its requeue is confirmed as futile; billing's
// console shows its own outbox with the same pages; a hostile row renders
// inert; without credentials the console shows nothing and refuses an
// action. axe-core runs in every page visited (no violation of any impact),
// and the pages the docs show are outlined against docs/img (and shot there
// with CONSOLE_SCREENSHOTS).
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
	axe := newAxeChecker(t)
	shots := newShots(t)
	dir := t.TempDir()
	billingBin := proctest.Build(t, "./cmd/billing")
	billingDB := "sqlite:" + filepath.Join(dir, "billing.db")
	bp := proctest.Start(t, billingBin, map[string]string{
		"DATABASE_URL": billingDB, "EVENTS_TOKEN": "test-token", "HTTP_ADDR": "127.0.0.1:0", "AUTH_DISABLED": "true",
	}, "serve")
	billingBase := "http://" + bp.ListenAddr(t)
	labelingDB := "sqlite:" + filepath.Join(dir, "labeling.db")
	env := baseEnv(labelingDB)
	env["BILLING_URL"] = billingBase
	env["CONSOLE_BILLING_URL"] = billingBase + "/console/"
	lp := proctest.Start(t, binary(t), env, "serve")
	labelingBase := "http://" + lp.ListenAddr(t)
	client := &http.Client{Timeout: 10 * time.Second}
	for _, base := range []string{billingBase, labelingBase} {
		ready(t, client, base)
	}

	// A dead letter, as the relay leaves one after its last attempt; a hostile
	// one; and, for the docs' screenshots, a failed row of another tag and rows
	// of both tags waiting for a retry an hour from now (the relay leaves them
	// alone during the test).
	db := dbtest.OpenSQLite(t, labelingDB)
	org, id, hostile, shot := uuid.New(), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	now := time.Now().UnixMilli()
	insert := func(id uuid.UUID, tag, payload, lastError string) {
		db.Exec(t, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, failed_at, last_error)
			VALUES ($1, $2, $3, $4, $4, 10, $4, $5)`, id.String(), tag, payload, now, lastError)
	}
	insert(id, "RuleActivated", `{"orgId":"`+org.String()+`","ruleId":"`+uuid.NewString()+`"}`, "billing answered 503")
	insert(hostile, "RuleActivated", `{"x":"<script>window.__xss=1</script>"}`, `<img src=x onerror="window.__xss=2">`)
	// The hostile row must not be requeued into billing: it stays failed.
	db.Exec(t, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, failed_at, last_error, trace_context)
		VALUES ($1, 'RuleDeactivated', $2, $3, $4, 10, $4, 'billing answered 503: service unavailable', $5)`,
		shot.String(), `{"orgId":"`+uuid.NewString()+`","ruleId":"`+uuid.NewString()+`"}`,
		now-40*time.Minute.Milliseconds(), now-2*time.Minute.Milliseconds(),
		`{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`)
	for i, tag := range []string{"RuleActivated", "RuleActivated", "RuleActivated", "RuleDeactivated", "RuleDeactivated"} {
		db.Exec(t, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, last_error)
			VALUES ($1, $2, $3, $4, $5, 3, 'billing answered 503')`, uuid.Must(uuid.NewV7()).String(), tag,
			`{"orgId":"`+uuid.NewString()+`","ruleId":"`+uuid.NewString()+`"}`,
			now-int64(10-i)*time.Minute.Milliseconds(), now+time.Hour.Milliseconds())
	}

	// A row billing refused as too old (a requeue only fails again), a row
	// of a tag no subscriber takes, waiting for its fifth attempt, and one
	// in flight: a relay's claim of an hour (none of this relay's).
	refused, stuck := uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	db.Exec(t, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, failed_at, last_error)
		VALUES ($1, 'RuleActivated', $2, $3, $3, 1, $4, $5)`, refused.String(),
		`{"orgId":"`+org.String()+`","ruleId":"`+uuid.NewString()+`"}`, now-30*24*time.Hour.Milliseconds(), now-5*time.Minute.Milliseconds(),
		`permanent: deliver RuleActivated `+refused.String()+`: billing answered 400 Bad Request: {"code":"event_too_old","message":"event too old: occurredAt is 720h0m0s ago, past RECEIPTS_RETENTION less its margin (648h0m0s): its receipt may be deleted, so it is never applied"}`)
	db.Exec(t, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, last_error)
		VALUES ($1, 'RuleArchived', $2, $3, $4, 4, 'no subscriber for tag RuleArchived')`, stuck.String(),
		`{"orgId":"`+uuid.NewString()+`","ruleId":"`+uuid.NewString()+`"}`, now-36*time.Minute.Milliseconds(), now+30*time.Minute.Milliseconds())
	db.Exec(t, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, claimed_until, claim_token, claim_lease, last_error)
		VALUES ($1, 'RuleActivated', $2, $3, $3, 2, $4, $5, 3600000, 'billing answered 503')`, uuid.Must(uuid.NewV7()).String(),
		`{"orgId":"`+uuid.NewString()+`","ruleId":"`+uuid.NewString()+`"}`, now-3*time.Minute.Milliseconds(), now+time.Hour.Milliseconds(), uuid.NewString())

	// Billing's own outbox, for its console's pages: QuotaChanged rows the
	// provider answered (billing runs no relay here: PROVIDER_URL is unset).
	bdb := dbtest.OpenSQLite(t, billingDB)
	providerRefused := uuid.Must(uuid.NewV7())
	quota := func(org uuid.UUID) string {
		return `{"orgId":"` + org.String() + `","activeRules":3,"sourceEventId":"` + uuid.NewString() + `","version":4}`
	}
	bdb.Exec(t, `INSERT INTO billing_outbox_events (id, event_tag, payload, created_at, available_at, attempts, failed_at, last_error)
		VALUES ($1, 'QuotaChanged', $2, $3, $3, 1, $3, 'permanent: call provider for QuotaChanged `+providerRefused.String()+`: provider answered 410 Gone: tenant closed')`,
		providerRefused.String(), quota(org), now-20*time.Minute.Milliseconds())
	for i := range 3 {
		bdb.Exec(t, `INSERT INTO billing_outbox_events (id, event_tag, payload, created_at, available_at, attempts, last_error)
			VALUES ($1, 'QuotaChanged', $2, $3, $4, $5, 'call provider for QuotaChanged: provider answered 503 Service Unavailable: maintenance')`,
			uuid.Must(uuid.NewV7()).String(), quota(uuid.New()), now-int64(10-i)*time.Minute.Milliseconds(), now+time.Hour.Milliseconds(), i+1)
	}
	for m := 1; m <= 59; m += 2 {
		bdb.Exec(t, `INSERT INTO billing_outbox_events (id, event_tag, payload, created_at, available_at, attempts, processed_at)
			VALUES ($1, 'QuotaChanged', $2, $3, $3, 1, $3)`, uuid.Must(uuid.NewV7()).String(), quota(uuid.New()), now-int64(m)*time.Minute.Milliseconds())
	}

	// And an hour of processed rows, so the overview's chart has bars.
	var values []string
	var args []any
	for m := 1; m <= 59; m++ {
		for k := 0; k < 2+(m*7)%11; k++ {
			at := now - int64(m)*time.Minute.Milliseconds() + int64(k)*1000
			n := len(args)
			values = append(values, fmt.Sprintf("($%d, $%d, '{}', $%d, $%d, 1, $%d)", n+1, n+2, n+3, n+3, n+3))
			args = append(args, uuid.Must(uuid.NewV7()).String(), []string{"RuleActivated", "RuleDeactivated"}[k%2], at)
		}
	}
	db.Exec(t, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, processed_at) VALUES `+
		strings.Join(values, ", "), args...)

	opts := append(chromedp.DefaultExecAllocatorOptions[:0:0],
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(profileDir(t)),
		chromedp.WindowSize(viewportW, viewportH),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 3*time.Minute)
	defer cancelT()
	require.NoError(t, chromedp.Run(ctx, chromedp.EmulateViewport(viewportW, viewportH)))
	defer func() { t.Log(axe.summary()) }()

	t.Run("the pages the docs show keep their structure", func(t *testing.T) {
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(labelingBase+"/console/"),
			chromedp.WaitVisible(`a[href="/console/failed?tag=RuleDeactivated"]`, chromedp.ByQuery),
		))
		axe.check(t, ctx, "labeling /console/ (overview)")
		shots.shoot(t, ctx, "console-overview", "labeling's /console/ (the overview)")
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(labelingBase+"/console/rows/"+shot.String()),
			chromedp.WaitVisible(`#payload`, chromedp.ByQuery),
		))
		axe.check(t, ctx, "labeling /console/rows/{id} (a failed row)")
		shots.shoot(t, ctx, "console-row", "labeling's /console/rows/{id} (a failed row)")
	})

	t.Run("the new pages the docs show keep their structure", func(t *testing.T) {
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(labelingBase+"/console/pending"),
			chromedp.WaitVisible(`a[href="/console/rows/`+stuck.String()+`"]`, chromedp.ByQuery),
		))
		axe.check(t, ctx, "labeling /console/pending (the pending rows)")
		shots.shoot(t, ctx, "console-pending", "labeling's /console/pending (the pending rows)")
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(labelingBase+"/console/rows/"+refused.String()),
			chromedp.WaitVisible(`#remedy`, chromedp.ByQuery),
		))
		axe.check(t, ctx, "labeling /console/rows/{id} (a row refused for good)")
		shots.shoot(t, ctx, "console-refused-row", "labeling's /console/rows/{id} (a row billing refused as too old)")
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(billingBase+"/console/outbox/"),
			chromedp.WaitVisible(`#answers`, chromedp.ByQuery),
		))
		axe.check(t, ctx, "billing /console/outbox/ (its outbox's overview)")
		shots.shoot(t, ctx, "console-billing-outbox", "billing's /console/outbox/ (its outbox's overview)")
	})

	t.Run("a row refused for good says what to do instead and warns before a requeue", func(t *testing.T) {
		var remedy, href, futile, button string
		var ok bool
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(labelingBase+"/console/rows/"+refused.String()),
			chromedp.Text(`#remedy`, &remedy, chromedp.ByQuery),
			chromedp.AttributeValue(`#remedy a`, "href", &href, &ok, chromedp.ByQuery),
			chromedp.Click(`button[value="requeue"]`, chromedp.ByQuery),
			chromedp.WaitVisible(`#futile`, chromedp.ByQuery),
			chromedp.Text(`#futile`, &futile, chromedp.ByQuery),
			chromedp.Text(`form[action="/console/act"] button`, &button, chromedp.ByQuery),
		))
		require.Contains(t, remedy, "Check the org's quota on billing")
		require.Equal(t, billingBase+"/console/?org="+org.String(), href)
		require.Contains(t, futile, "1 of them will fail again")
		require.Equal(t, "Yes, requeue 1 row(s), knowing 1 will fail again", button)
		axe.check(t, ctx, "labeling /console/confirm (a requeue that will fail again)")
		shots.shoot(t, ctx, "console-confirm-refused", "labeling's /console/confirm (a requeue that will fail again)")
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click(`#cancel`, chromedp.ByQuery),
			chromedp.WaitVisible(`a[href="/console/rows/`+refused.String()+`"]`, chromedp.ByQuery),
		))
		require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND failed_at IS NOT NULL`, refused.String()), "cancelled: still failed")
	})

	t.Run("a row retrying for ever is found among the pending ones and failed now", func(t *testing.T) {
		var touches, done string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(labelingBase+"/console/"),
			chromedp.Click(`a[href="/console/pending?state=retrying"]`, chromedp.ByQuery),
			chromedp.WaitVisible(`a[href="/console/rows/`+stuck.String()+`"]`, chromedp.ByQuery),
		))
		axe.check(t, ctx, "labeling /console/pending?state=retrying")
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click(`a[href="/console/rows/`+stuck.String()+`"]`, chromedp.ByQuery),
			chromedp.WaitVisible(`button[value="fail"]`, chromedp.ByQuery),
		))
		axe.check(t, ctx, "labeling /console/rows/{id} (a pending row)")
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click(`button[value="fail"]`, chromedp.ByQuery),
			chromedp.WaitVisible(`#fence`, chromedp.ByQuery),
			chromedp.Text(`#touches`, &touches, chromedp.ByQuery),
		))
		require.Equal(t, "This will fail now 1 pending row(s).", touches)
		axe.check(t, ctx, "labeling /console/confirm (fail now)")
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click(`form[action="/console/act"] button`, chromedp.ByQuery),
			chromedp.WaitVisible(`#message`, chromedp.ByQuery),
			chromedp.Text(`#message`, &done, chromedp.ByQuery),
		))
		require.Equal(t, "Failed 1 row(s).", done)
		require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND failed_at IS NOT NULL`, stuck.String()))
	})

	t.Run("billing's console lists its outbox's rows with the same pages", func(t *testing.T) {
		for _, p := range []struct{ path, wait, name string }{
			{"/console/outbox/pending", `a[href^="/console/outbox/rows/"]`, "billing /console/outbox/pending"},
			{"/console/outbox/failed", `a[href="/console/outbox/rows/` + providerRefused.String() + `"]`, "billing /console/outbox/failed"},
			{"/console/outbox/rows/" + providerRefused.String(), `#remedy`, "billing /console/outbox/rows/{id} (refused by the provider)"},
		} {
			require.NoError(t, chromedp.Run(ctx,
				chromedp.Navigate(billingBase+p.path),
				chromedp.WaitVisible(p.wait, chromedp.ByQuery),
			))
			axe.check(t, ctx, p.name)
		}
		var href string
		var ok bool
		require.NoError(t, chromedp.Run(ctx, chromedp.AttributeValue(`#remedy a`, "href", &href, &ok, chromedp.ByQuery)))
		require.Equal(t, "/console/?org="+org.String(), href)
	})

	t.Run("a dead letter is found, opened and requeued, and billing applies it", func(t *testing.T) {
		row := `a[href="/console/rows/` + id.String() + `"]`
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(labelingBase+"/console/failed"),
			chromedp.WaitVisible(row, chromedp.ByQuery),
		))
		axe.check(t, ctx, "labeling /console/failed")
		var touches, done string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click(row, chromedp.ByQuery),
			chromedp.WaitVisible(`#payload`, chromedp.ByQuery),
			chromedp.Click(`button[value="requeue"]`, chromedp.ByQuery),
			chromedp.WaitVisible(`#touches`, chromedp.ByQuery),
			chromedp.Text(`#touches`, &touches, chromedp.ByQuery),
		))
		axe.check(t, ctx, "labeling /console/confirm (the confirmation)")
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Click(`form[action="/console/act"] button`, chromedp.ByQuery),
			// The result page's own element: the confirmation page's paragraphs
			// are still there until the POST's answer replaces it.
			chromedp.WaitVisible(`#message`, chromedp.ByQuery),
			chromedp.Text(`#message`, &done, chromedp.ByQuery),
		))
		require.Contains(t, touches, "requeue 1 failed row(s)")
		require.Equal(t, "Requeued 1 row(s).", done)
		axe.check(t, ctx, "labeling /console/act (the result)")
		// Billing applies the requeued event within the relay's next claim:
		// waited for over plain HTTP, then seen in the browser.
		quota := billingBase + "/console/?org=" + url.QueryEscape(org.String())
		require.Eventually(t, func() bool {
			resp, err := client.Get(quota)
			if err != nil {
				return false
			}
			defer func() { _ = resp.Body.Close() }()
			b, _ := io.ReadAll(resp.Body)
			return strings.Contains(string(b), `id="active-rules">1<`)
		}, 60*time.Second, 100*time.Millisecond, "billing's quota shows the requeued event")
		var rules string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(quota),
			chromedp.Text(`#active-rules`, &rules, chromedp.ByQuery),
		))
		require.Equal(t, "1", rules)
		axe.check(t, ctx, "billing /console/?org= (quota)")
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(billingBase+"/console/nats"),
			chromedp.WaitVisible(`main p`, chromedp.ByQuery),
		))
		axe.check(t, ctx, "billing /console/nats")
	})

	t.Run("a hostile row renders as text and runs no script", func(t *testing.T) {
		var xss, lastError, payload string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(labelingBase+"/console/rows/"+hostile.String()),
			chromedp.WaitVisible(`#last-error`, chromedp.ByQuery),
			chromedp.Text(`#last-error`, &lastError, chromedp.ByQuery),
			chromedp.Text(`#payload`, &payload, chromedp.ByQuery),
			chromedp.Evaluate(`String(window.__xss)`, &xss),
		))
		require.Equal(t, "undefined", xss)
		require.Equal(t, `<img src=x onerror="window.__xss=2">`, lastError)
		require.True(t, strings.Contains(payload, "<script>window.__xss=1</script>"), payload)
	})

	t.Run("a requeue without the CSRF token is refused", func(t *testing.T) {
		resp, err := client.PostForm(labelingBase+"/console/act", url.Values{"action": {"requeue"}, "id": {hostile.String()}})
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, http.StatusForbidden, resp.StatusCode)
		require.Equal(t, 1, db.Count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND failed_at IS NOT NULL`, hostile.String()))
	})

	t.Run("without credentials the console shows nothing and refuses a requeue", func(t *testing.T) {
		// One more labeling, with authentication on (a test JWKS issuer).
		iss := authtest.New(t)
		authDB := "sqlite:" + filepath.Join(dir, "labeling-auth.db")
		env := baseEnv(authDB)
		delete(env, "AUTH_DISABLED")
		env["AUTH_JWKS_URL"], env["AUTH_ISSUER"], env["AUTH_AUDIENCE"] = iss.JWKSURL(), authtest.IssuerURL, authtest.Audience
		ap := proctest.Start(t, binary(t), env, "serve")
		base := "http://" + ap.ListenAddr(t)
		ready(t, client, base)
		adb := dbtest.OpenSQLite(t, authDB)
		secret, marker := uuid.Must(uuid.NewV7()), "operator-only-"+uuid.NewString()
		adb.Exec(t, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, failed_at, last_error)
			VALUES ($1, 'RuleActivated', $2, $3, $3, 10, $3, 'billing answered 503')`, secret.String(), `{"x":"`+marker+`"}`, now)
		stillFailed := func() int {
			return adb.Count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND failed_at IS NOT NULL`, secret.String())
		}

		// A browser of its own (cookies are per host, not per port).
		bctx, cancelB := chromedp.NewContext(ctx, chromedp.WithNewBrowserContext())
		defer cancelB()
		var loc, body string
		resp, err := chromedp.RunResponse(bctx, chromedp.Navigate(base+"/console/failed"))
		require.NoError(t, err)
		require.NoError(t, chromedp.Run(bctx,
			chromedp.WaitVisible(`textarea#token`, chromedp.ByQuery),
			chromedp.Location(&loc),
			chromedp.Text(`body`, &body, chromedp.ByQuery),
		))
		require.Equal(t, base+"/console/login", loc)
		require.Equal(t, int64(http.StatusOK), resp.Status)
		require.NotContains(t, body, marker)
		require.NotContains(t, body, secret.String())
		axe.check(t, bctx, "labeling /console/login (authentication on)")

		// The login page's CSRF token is valid: the POST lacks only a session.
		resp, err = chromedp.RunResponse(bctx, chromedp.Evaluate(`(() => {
			const f = document.createElement('form');
			f.method = 'post';
			f.action = '/console/act';
			const add = (name, value) => {
				const i = document.createElement('input');
				i.type = 'hidden'; i.name = name; i.value = value;
				f.appendChild(i);
			};
			add('csrf', document.querySelector('input[name=csrf]').value);
			add('action', 'requeue');
			add('id', '`+secret.String()+`');
			document.body.appendChild(f);
			f.submit();
			return true;
		})()`, nil))
		require.NoError(t, err)
		require.Equal(t, int64(http.StatusUnauthorized), resp.Status)
		require.NoError(t, chromedp.Run(bctx, chromedp.Text(`body`, &body, chromedp.ByQuery)))
		require.Contains(t, body, "sign in with an operator token")
		require.Equal(t, 1, stillFailed())

		// An operator token opens it: the refusals above were for want of one.
		claims := authtest.Claims()
		claims["scope"] = auth.OperatorScope
		var link string
		require.NoError(t, chromedp.Run(bctx,
			chromedp.Navigate(base+"/console/login"),
			chromedp.SetValue(`textarea#token`, iss.Token(t, claims), chromedp.ByQuery),
			chromedp.Click(`form[action="/console/login"] button`, chromedp.ByQuery),
			chromedp.WaitVisible(`#state`, chromedp.ByQuery),
			chromedp.Navigate(base+"/console/failed"),
			chromedp.Text(`a[href="/console/rows/`+secret.String()+`"]`, &link, chromedp.ByQuery),
		))
		require.Equal(t, secret.String(), link)
		require.Equal(t, 1, stillFailed())
	})
}

// profileDir is a fresh Chromium profile folder, removed when the test ends.
// Not t.TempDir: Chromium's helper processes may still write into the profile
// for a moment after the browser has been stopped, and TempDir's single
// RemoveAll then fails the test ("directory not empty", once in CI); this
// cleanup tries again until the folder is gone, within 10s.
func profileDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "console-browser-profile-")
	require.NoError(t, err)
	t.Cleanup(func() {
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := os.RemoveAll(dir)
			if err == nil {
				return
			}
			if time.Now().After(deadline) {
				t.Errorf("remove the browser profile %s: %v", dir, err)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return dir
}

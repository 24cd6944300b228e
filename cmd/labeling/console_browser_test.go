package main

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

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

// TestConsoleInBrowser drives headless Chromium against the real binaries: a
// dead letter is found on the failed page, opened, requeued through the
// confirmation, and billing's console then shows the org's quota changed; a
// hostile row renders inert.
func TestConsoleInBrowser(t *testing.T) {
	t.Parallel()
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
	lp := proctest.Start(t, binary(t), env, "serve")
	labelingBase := "http://" + lp.ListenAddr(t)
	client := &http.Client{Timeout: 10 * time.Second}
	for _, base := range []string{billingBase, labelingBase} {
		require.Eventually(t, func() bool {
			resp, err := client.Get(base + "/readyz")
			if err != nil {
				return false
			}
			_ = resp.Body.Close()
			return resp.StatusCode == http.StatusOK
		}, 60*time.Second, 50*time.Millisecond)
	}

	// A dead letter, as the relay leaves one after its last attempt.
	db := dbtest.OpenSQLite(t, labelingDB)
	org, id, hostile := uuid.New(), uuid.Must(uuid.NewV7()), uuid.Must(uuid.NewV7())
	now := time.Now().UnixMilli()
	insert := func(id uuid.UUID, payload, lastError string) {
		db.Exec(t, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, failed_at, last_error)
			VALUES ($1, 'RuleActivated', $2, $3, $3, 10, $3, $4)`, id.String(), payload, now, lastError)
	}
	insert(id, `{"orgId":"`+org.String()+`","ruleId":"`+uuid.NewString()+`"}`, "billing answered 503")
	insert(hostile, `{"x":"<script>window.__xss=1</script>"}`, `<img src=x onerror="window.__xss=2">`)
	// The hostile row must not be requeued into billing: it stays failed.

	opts := append(chromedp.DefaultExecAllocatorOptions[:0:0],
		chromedp.ExecPath(chromium(t)),
		chromedp.Flag("headless", true), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true), chromedp.NoFirstRun,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.UserDataDir(t.TempDir()),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelT := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelT()

	t.Run("a dead letter is found, opened and requeued, and billing applies it", func(t *testing.T) {
		row := `a[href="/console/rows/` + id.String() + `"]`
		var touches, done string
		require.NoError(t, chromedp.Run(ctx,
			chromedp.Navigate(labelingBase+"/console/failed"),
			chromedp.WaitVisible(row, chromedp.ByQuery),
			chromedp.Click(row, chromedp.ByQuery),
			chromedp.WaitVisible(`#payload`, chromedp.ByQuery),
			chromedp.Click(`button[value="requeue"]`, chromedp.ByQuery),
			chromedp.WaitVisible(`#touches`, chromedp.ByQuery),
			chromedp.Text(`#touches`, &touches, chromedp.ByQuery),
			chromedp.Click(`form[action="/console/act"] button`, chromedp.ByQuery),
			// The result page's own element: the confirmation page's paragraphs
			// are still there until the POST's answer replaces it.
			chromedp.WaitVisible(`#message`, chromedp.ByQuery),
			chromedp.Text(`#message`, &done, chromedp.ByQuery),
		))
		require.Contains(t, touches, "requeue 1 failed row(s)")
		require.Equal(t, "Requeued 1 row(s).", done)
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
}

package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/console"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// row inserts an outbox row as the relay leaves it: attempts, available_at
// (ms from now), claimed_until (ms from now; 0: none), failed (at now) and
// last_error ("" none).
func (b *consoleBundle) row(t *testing.T, tag string, attempts int, availableIn, claimedFor int64, failed bool, lastError string) uuid.UUID {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	now := time.Now().UnixMilli()
	var claimed, failedAt, lastErr any
	if claimedFor != 0 {
		claimed = now + claimedFor
	}
	if failed {
		failedAt = now
	}
	if lastError != "" {
		lastErr = lastError
	}
	b.db.Exec(t, `INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts, claimed_until, claim_token, claim_lease, failed_at, last_error)
		VALUES ($1, $2, '{"orgId":"0f6d1a8e-1111-4c6b-9d2a-3c1a2b3c4d5e"}', $3, $4, $5, $6, $7, $8, $9, $10)`,
		id.String(), tag, now, now+availableIn, attempts, claimed, map[bool]any{true: uuid.NewString(), false: nil}[claimedFor != 0],
		map[bool]any{true: int64(60000), false: nil}[claimedFor != 0], failedAt, lastErr)
	return id
}

// csrf opens path and returns its form's CSRF token, the cookie kept in jar.
func (b *consoleBundle) csrf(t *testing.T, path string, jar *string) string {
	t.Helper()
	page := b.send(t, http.MethodGet, path, nil, jar, loopback).Body.String()
	m := csrfInput.FindStringSubmatch(page)
	require.NotNil(t, m, "a form on %s", path)
	return m[1]
}

func TestConsolePendingRows(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		b := consoleSetup(t, d, true)
		ready := b.row(t, "RuleActivated", 0, 0, 0, false, "")
		retrying := b.row(t, "RuleActivated", 3, time.Hour.Milliseconds(), 0, false, "billing answered 503")
		archived := b.row(t, "RuleArchived", 4, 30*time.Minute.Milliseconds(), 0, false, "no subscriber for tag RuleArchived")
		inflight := b.row(t, "RuleActivated", 1, 0, time.Minute.Milliseconds(), false, "")
		failed := b.row(t, "RuleActivated", 10, 0, 0, true, "billing answered 503")
		get := func(path string) (int, string) {
			rec := b.send(t, http.MethodGet, path, nil, nil, loopback)
			return rec.Code, rec.Body.String()
		}

		t.Run("the overview links each count to its rows", func(t *testing.T) {
			_, body := get("/console/")
			require.Contains(t, body, `<a href="/console/pending">4<`)
			require.Contains(t, body, `<a href="/console/pending?state=inflight">1<`)
			require.Contains(t, body, `<a href="/console/pending?state=retrying">2<`)
			require.Contains(t, body, `<a href="/console/pending?tag=RuleArchived">1<`)
		})

		t.Run("the pending list shows every pending row with attempts, next attempt and last error, and no failed row", func(t *testing.T) {
			code, body := get("/console/pending")
			require.Equal(t, http.StatusOK, code, body)
			for _, id := range []uuid.UUID{ready, retrying, archived, inflight} {
				require.Contains(t, body, id.String())
			}
			require.NotContains(t, body, failed.String())
			require.Contains(t, body, "no subscriber for tag RuleArchived")
			require.Contains(t, body, `<th scope="col">Next attempt</th>`)
			require.Regexp(t, regexp.QuoteMeta(retrying.String())+`</a></td>\s*<td>RuleActivated</td>\s*<td>waiting for a retry</td>\s*<td class="num">3</td>\s*<td>`+
				regexp.QuoteMeta(console.FormatTime(b.availableAt(t, retrying)))+`</td>\s*<td>billing answered 503</td>`, body)
			require.Contains(t, body, "in flight until ")
		})

		t.Run("it filters by state, tag and error text", func(t *testing.T) {
			for path, want := range map[string][]uuid.UUID{
				"/console/pending?state=retrying":           {retrying, archived},
				"/console/pending?state=inflight":           {inflight},
				"/console/pending?state=ready":              {ready},
				"/console/pending?tag=RuleArchived":         {archived},
				"/console/pending?error=no+subscriber":      {archived},
				"/console/pending?state=retrying&error=503": {retrying},
			} {
				code, body := get(path)
				require.Equal(t, http.StatusOK, code, path)
				for _, id := range []uuid.UUID{ready, retrying, archived, inflight} {
					listed := strings.Contains(body, `href="/console/rows/`+id.String()+`"`)
					require.Equal(t, contains(want, id), listed, "%s lists %s", path, id)
				}
			}
			code, _ := get("/console/pending?state=dead")
			require.Equal(t, http.StatusBadRequest, code)
		})

		t.Run("a pending row's page says when it is tried next and offers fail now", func(t *testing.T) {
			_, body := get("/console/rows/" + retrying.String())
			require.Contains(t, body, `<td id="row-state">pending, waiting for a retry</td>`)
			require.Contains(t, body, `<th scope="row">Next attempt</th>`)
			require.Contains(t, body, `<button type="submit" name="action" value="fail">Fail now</button>`)
			require.NotContains(t, body, `value="requeue"`)
		})
	})
}

func contains(ids []uuid.UUID, id uuid.UUID) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}

// availableAt is a row's available_at.
func (b *consoleBundle) availableAt(t *testing.T, id uuid.UUID) int64 {
	t.Helper()
	var at int64
	require.NoError(t, b.db.QueryRow(`SELECT available_at FROM outbox_events WHERE id = $1`, id.String()).Scan(&at))
	return at
}

func TestConsolePendingPages(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		b := consoleSetup(t, d, true)
		for range outboxPageSize + 5 {
			b.row(t, "RuleActivated", 2, time.Hour.Milliseconds(), 0, false, "e")
		}
		seen, pages := b.pageThrough(t, "/console/pending?state=retrying", "state=retrying")
		require.Equal(t, 2, pages)
		require.Len(t, seen, outboxPageSize+5)
	})
}

func TestConsoleFailNow(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		b := consoleSetup(t, d, true)
		failedNow := func(id uuid.UUID) int {
			return b.db.Count(t, `SELECT count(*) FROM outbox_events WHERE id = $1 AND failed_at IS NOT NULL
				AND claim_token IS NULL AND claimed_until IS NULL AND last_error LIKE 'failed now by an operator%'`, id.String())
		}

		t.Run("one row, through the confirmation, and only if still pending", func(t *testing.T) {
			retrying := b.row(t, "RuleActivated", 3, time.Hour.Milliseconds(), 0, false, "billing answered 503")
			failed := b.row(t, "RuleActivated", 10, 0, 0, true, "billing answered 503")
			var jar string
			csrf := b.csrf(t, "/console/rows/"+retrying.String(), &jar)
			form := url.Values{"csrf": {csrf}, "action": {"fail"}, "id": {retrying.String(), failed.String()}}
			rec := b.send(t, http.MethodPost, "/console/confirm", form, &jar, loopback)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), "This will fail now <strong>1</strong> pending row(s).")
			require.Contains(t, rec.Body.String(), `id="fence"`)
			require.Zero(t, failedNow(retrying), "nothing changes before the confirmation")

			rec = b.send(t, http.MethodPost, "/console/act", form, &jar, loopback)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.Contains(t, rec.Body.String(), "Failed 1 row(s).")
			require.Equal(t, 1, failedNow(retrying))
			require.Zero(t, failedNow(failed), "a failed row keeps its failure")

			body := b.send(t, http.MethodGet, "/console/rows/"+retrying.String(), nil, nil, loopback).Body.String()
			require.Contains(t, body, `value="requeue">Requeue</button>`, "a row failed by hand is requeued without a warning")
			require.NotContains(t, body, "Refused for good")
		})

		t.Run("every pending row of a tag, the in-flight one's claim cleared", func(t *testing.T) {
			inflight := b.row(t, "RuleArchived", 1, 0, time.Minute.Milliseconds(), false, "")
			waiting := b.row(t, "RuleArchived", 5, time.Hour.Milliseconds(), 0, false, "no subscriber for tag RuleArchived")
			other := b.row(t, "RuleActivated", 0, 0, 0, false, "")
			var jar string
			csrf := b.csrf(t, "/console/pending?tag=RuleArchived", &jar)
			rec := b.send(t, http.MethodPost, "/console/confirm", url.Values{"csrf": {csrf}, "action": {"fail"}, "tag": {"RuleArchived"}}, &jar, loopback)
			require.Contains(t, rec.Body.String(), "This will fail now <strong>2</strong> pending row(s) of tag RuleArchived.")
			form := url.Values{"csrf": {csrf}, "action": {"fail"}, "id": {inflight.String(), waiting.String()}}
			rec = b.send(t, http.MethodPost, "/console/act", form, &jar, loopback)
			require.Contains(t, rec.Body.String(), "Failed 2 row(s).")
			require.Equal(t, 1, failedNow(inflight))
			require.Equal(t, 1, failedNow(waiting))
			require.Zero(t, failedNow(other))
		})
	})
}

func TestConsoleRefusedRows(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		b := consoleSetup(t, d, true)
		tooOld := b.row(t, "RuleActivated", 1, 0, 0, true,
			`permanent: deliver RuleActivated 0190: billing answered 400 Bad Request: {"error":{"code":"event_too_old","message":"event too old"}}`)
		unavailable := b.row(t, "RuleActivated", 10, 0, 0, true, "billing answered 503")
		invalid := b.row(t, "RuleActivated", 1, 0, 0, true, "permanent: invalid RuleActivated payload: orgId is missing or nil")

		t.Run("the page of a row refused for good says so and what to do instead", func(t *testing.T) {
			body := b.send(t, http.MethodGet, "/console/rows/"+tooOld.String(), nil, nil, loopback).Body.String()
			require.Contains(t, body, "Refused for good: a requeue fails again")
			require.Regexp(t, `<p id="refusal">[^<]*event_too_old`, body)
			require.Regexp(t, `<p id="remedy"><strong>Instead:</strong> Check whether the event was applied`, body)
			require.Contains(t, body, `value="requeue">Requeue (fails again)</button>`)

			body = b.send(t, http.MethodGet, "/console/rows/"+invalid.String(), nil, nil, loopback).Body.String()
			require.Regexp(t, `<p id="refusal">The payload does not decode or validate`, body)
			require.Contains(t, body, "Delete this row")

			body = b.send(t, http.MethodGet, "/console/rows/"+unavailable.String(), nil, nil, loopback).Body.String()
			require.NotContains(t, body, "Refused for good", "a row that ran out of attempts may succeed when requeued")
			require.Contains(t, body, `value="requeue">Requeue</button>`)
		})

		t.Run("the failed list marks it", func(t *testing.T) {
			body := b.send(t, http.MethodGet, "/console/failed", nil, nil, loopback).Body.String()
			require.Equal(t, 2, strings.Count(body, "refused for good:"))
		})

		t.Run("its requeue's confirmation says it will fail again", func(t *testing.T) {
			var jar string
			csrf := b.csrf(t, "/console/rows/"+tooOld.String(), &jar)
			form := url.Values{"csrf": {csrf}, "action": {"requeue"}, "id": {tooOld.String(), unavailable.String()}}
			body := b.send(t, http.MethodPost, "/console/confirm", form, &jar, loopback).Body.String()
			require.Contains(t, body, "<strong>1 of them will fail again:</strong>")
			require.Contains(t, body, "Yes, requeue 2 row(s), knowing 1 will fail again")

			form.Set("id", unavailable.String())
			body = b.send(t, http.MethodPost, "/console/confirm", form, &jar, loopback).Body.String()
			require.NotContains(t, body, "will fail again")
			require.Contains(t, body, "Yes, requeue 1 row(s)</button>")
		})
	})
}

func TestRefusalOf(t *testing.T) {
	t.Parallel()
	for lastError, want := range map[string]string{
		`permanent: deliver RuleActivated x: billing answered 400 Bad Request: {"error":{"code":"event_too_old"}}`:           console.RefusedTooOld,
		`permanent: deliver RuleActivated x: billing answered 400 Bad Request: body: unknown field "traceparent"`:            console.RefusedRequest,
		`permanent: deliver RuleActivated x: billing answered 400 Bad Request: invalid payload: orgId is missing`:            console.RefusedRequest,
		`permanent: call provider for QuotaChanged x: provider answered 410 Gone: gone`:                                      console.RefusedRequest,
		`permanent: decode RuleActivated payload: unexpected end of JSON input`:                                              console.RefusedInvalidPayload,
		`permanent: invalid QuotaChanged payload: orgId and sourceEventId are required`:                                      console.RefusedInvalidPayload,
		`permanent: encode RuleActivated x: json: unsupported value`:                                                         console.RefusedInvalidPayload,
		`billing answered 503 Service Unavailable: try later`:                                                                "",
		`attempt 10 of 10 was never settled (its relay died or lost the database while holding the claim); last error: none`: "",
		`failed now by an operator after 2 attempt(s); last error: permanent: whatever`:                                      "",
		`deliver RuleActivated x: billing answered 400 Bad Request: event_too_old`:                                           "",
	} {
		t.Run(lastError, func(t *testing.T) {
			t.Parallel()
			r, ok := console.RefusalOf(lastError)
			require.Equal(t, want != "", ok)
			require.Equal(t, want, r.Kind)
		})
	}
}

package billing_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/apitest"
	"github.com/acme/outboxpair/internal/testsupport/authtest"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/inboxtest"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

// token is the events token of the tests' deliveries.
const token = inboxtest.Token

type bundle struct {
	db   *dbtest.DB
	pool *pgxpool.Pool // PostgreSQL only (nil on SQLite)
	svc  *billing.Service
	e    *echo.Echo
	iss  *authtest.Issuer
}

// freshDB is a fresh billing database of dialect d.
func freshDB(t testing.TB, d sqldb.Dialect) *dbtest.DB {
	t.Helper()
	return dbtest.New(t, d, migrations.Billing)
}

// onPool is the test database behind a pool the test configured itself (a
// tracer, an unreachable address).
func onPool(pool *pgxpool.Pool) *dbtest.DB {
	return &dbtest.DB{DB: postgres.NewDB(pool), Pool: pool}
}

// setup is billing on db (freshDB's, or onPool's) with opts: its Service, its
// HTTP API with authentication on, and the database to inspect. It is the one
// setup of billing's tests.
func setup(t testing.TB, db *dbtest.DB, opts ...billing.Option) *bundle {
	t.Helper()
	pool := db.Pool
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc := billing.NewService(db.DB, logger, opts...)
	h, err := billing.NewHandler(svc, billing.Config{EventsToken: token, ReceiptsRetention: time.Hour})
	require.NoError(t, err)
	e := web.New(logger, db.DB)
	// Authentication is on, as in production: quotaHTTP sends a valid token for
	// the org it asks about (auth_test.go attacks it).
	iss := authtest.New(t)
	h.Register(e, iss.Guard(t, nil))
	return &bundle{db: db, pool: pool, svc: svc, e: e, iss: iss}
}

// event is a delivery body.
type event struct {
	ID, Type  string
	Org, Rule uuid.UUID
}

func newEvent(typ string, org uuid.UUID) event {
	return event{ID: uuid.Must(uuid.NewV7()).String(), Type: typ, Org: org, Rule: uuid.New()}
}

func (ev event) body() string {
	return fmt.Sprintf(`{"id":%q,"type":%q,"occurredAt":1767225600000,"payload":{"orgId":%q,"ruleId":%q}}`,
		ev.ID, ev.Type, ev.Org, ev.Rule)
}

// deliver POSTs body to the events endpoint with the right token and, when the
// body has an id, the matching Idempotency-Key; edit changes the request first.
func (b *bundle) deliver(t testing.TB, body string, edit ...func(*http.Request)) *httptest.ResponseRecorder {
	t.Helper()
	return apitest.Do(t, b.e, eventRequest(body, edit...))
}

// eventRequest is a delivery of body as labeling sends it, edited by edit.
func eventRequest(body string, edit ...func(*http.Request)) *http.Request {
	return inboxtest.Request(body, edit...)
}

func (b *bundle) quotaHTTP(t testing.TB, org string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/v1/orgs/"+org+"/quota", nil)
	req.Header.Set(echo.HeaderAuthorization, "Bearer "+b.iss.ForPath(t, req.URL.Path))
	return apitest.Do(t, b.e, req)
}

// activeRules reads billing_quota directly; nil when the org has no row.
func (b *bundle) activeRules(t testing.TB, org uuid.UUID) *int64 {
	t.Helper()
	var n []int64
	rows := b.db.Query(t, `SELECT active_rules FROM billing_quota WHERE org_id = $1`, org)
	for rows.Next() {
		var v int64
		require.NoError(t, rows.Scan(&v))
		n = append(n, v)
	}
	require.NoError(t, rows.Err())
	if len(n) == 0 {
		return nil
	}
	return &n[0]
}

func (b *bundle) count(t testing.TB, table string) int {
	t.Helper()
	// table is one of two constants of this file, never input.
	return b.db.Count(t, `SELECT count(*) FROM `+table)
}

func (b *bundle) hasReceipt(t testing.TB, id string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, b.db.QueryRow(
		`SELECT EXISTS (SELECT 1 FROM billing_receipts WHERE event_id = $1)`, id).Scan(&ok))
	return ok
}

func errorCode(t testing.TB, rec *httptest.ResponseRecorder) string {
	t.Helper()
	var body web.ErrorBody
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &body), rec.Body.String())
	return body.Error.Code
}

// failAtCommit makes the commit of a transaction that changed billing_quota fail
// with SQLSTATE code, times times (every time when times < 0), through a deferred
// constraint trigger: it fires at COMMIT, after the receipt and the quota change
// are both written, which is exactly where billing.events.before-commit sits. It
// hangs on the quota table, so a receipt committed on its own, before the change,
// would survive the failure and be caught. The calls are counted in a sequence,
// which a rollback does not undo.
func (b *bundle) failAtCommit(t testing.TB, code string, times int) (calls func() int64) {
	t.Helper()
	ctx := context.Background()
	_, err := b.pool.Exec(ctx, fmt.Sprintf(`
		CREATE SEQUENCE fail_calls;
		CREATE FUNCTION fail_commit() RETURNS trigger LANGUAGE plpgsql AS $$
		DECLARE n bigint := nextval('fail_calls');
		BEGIN
			IF %d < 0 OR n <= %d THEN
				RAISE EXCEPTION 'injected commit failure' USING ERRCODE = '%s';
			END IF;
			RETURN NULL;
		END $$;
		CREATE CONSTRAINT TRIGGER fail_commit AFTER INSERT OR UPDATE ON billing_quota
			DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION fail_commit();`,
		times, times, code))
	require.NoError(t, err)
	return func() int64 {
		var n int64
		require.NoError(t, b.pool.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM fail_calls`).Scan(&n))
		return n
	}
}

func TestDeliverIdempotent(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("the same event delivered twice changes the quota once", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			ev := newEvent(billing.RuleActivated, org)
			for range 2 {
				rec := b.deliver(t, ev.body())
				require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
				require.Empty(t, rec.Body.String())
			}
			require.EqualValues(t, 1, *b.activeRules(t, org))
			require.Equal(t, 1, b.count(t, "billing_receipts"))
		})

		t.Run("the same event delivered 50 times in a row changes the quota once", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			ev := newEvent(billing.RuleDeactivated, org)
			for range 50 {
				rec := b.deliver(t, ev.body())
				require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
			}
			require.EqualValues(t, -1, *b.activeRules(t, org))
			require.Equal(t, 1, b.count(t, "billing_receipts"))
		})

		t.Run("the same event delivered 50 times at once changes the quota once", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			ev := newEvent(billing.RuleActivated, org)
			codes := deliverAll(t, b, 50, func(int) string { return ev.body() })
			for i, c := range codes {
				require.Equal(t, http.StatusNoContent, c, "delivery %d", i)
			}
			require.EqualValues(t, 1, *b.activeRules(t, org))
			require.Equal(t, 1, b.count(t, "billing_receipts"))
		})
	})
}

// deliverAll sends n bodies at once and returns the status codes.
func deliverAll(t *testing.T, b *bundle, n int, body func(i int) string) []int {
	t.Helper()
	codes := make([]int, n)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			codes[i] = b.deliver(t, body(i)).Code
		}()
	}
	close(start)
	wg.Wait()
	return codes
}

func TestDeliverFailureBeforeCommit(t *testing.T) {
	t.Parallel()

	t.Run("a failure after the writes leaves nothing and a redelivery applies once", func(t *testing.T) {
		t.Parallel()
		b := setup(t, freshDB(t, sqldb.Postgres))
		calls := b.failAtCommit(t, "P0001", 1)
		org := uuid.New()
		ev := newEvent(billing.RuleActivated, org)

		rec := b.deliver(t, ev.body())
		require.Equal(t, http.StatusInternalServerError, rec.Code, rec.Body.String())
		require.NotContains(t, rec.Body.String(), "injected")
		require.EqualValues(t, 1, calls(), "the failure must come after the receipt insert")
		require.False(t, b.hasReceipt(t, ev.ID), "the receipt must roll back with the change")
		require.Nil(t, b.activeRules(t, org), "the change must roll back with the receipt")

		rec = b.deliver(t, ev.body())
		require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
		rec = b.deliver(t, ev.body())
		require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
		require.True(t, b.hasReceipt(t, ev.ID))
		require.EqualValues(t, 1, *b.activeRules(t, org))
	})

	t.Run("a serialization failure is retried in-process and applies once", func(t *testing.T) {
		t.Parallel()
		b := setup(t, freshDB(t, sqldb.Postgres))
		calls := b.failAtCommit(t, "40001", 2)
		org := uuid.New()
		ev := newEvent(billing.RuleActivated, org)

		rec := b.deliver(t, ev.body())
		require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
		require.EqualValues(t, 3, calls(), "two failed attempts and one that committed")
		require.EqualValues(t, 1, *b.activeRules(t, org))
	})

	t.Run("a deadlock is retried in-process and applies once", func(t *testing.T) {
		t.Parallel()
		b := setup(t, freshDB(t, sqldb.Postgres))
		calls := b.failAtCommit(t, "40P01", 1)
		org := uuid.New()
		ev := newEvent(billing.RuleDeactivated, org)

		rec := b.deliver(t, ev.body())
		require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
		require.EqualValues(t, 2, calls())
		require.EqualValues(t, -1, *b.activeRules(t, org))
	})

	t.Run("contention that outlasts the retries answers 503 and writes nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, freshDB(t, sqldb.Postgres))
		calls := b.failAtCommit(t, "40001", -1)
		org := uuid.New()
		ev := newEvent(billing.RuleActivated, org)

		rec := b.deliver(t, ev.body())
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
		require.EqualValues(t, 5, calls(), "five attempts, then back to the sender")
		require.False(t, b.hasReceipt(t, ev.ID))
		require.Nil(t, b.activeRules(t, org))
	})
}

func TestDeliverRejected(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		org, rule, id := uuid.New(), uuid.New(), uuid.Must(uuid.NewV7())
		env := func(payload string) string {
			return fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":1767225600000,"payload":%s}`, id, payload)
		}
		cases := []struct {
			name, body string
			status     int
			edit       func(*http.Request)
		}{
			{name: "malformed JSON", body: `{"id":`},
			{name: "an empty body", body: ``},
			{name: "two JSON values", body: env(`{"orgId":"`+org.String()+`","ruleId":"`+rule.String()+`"}`) + `{}`},
			// Go's encoding/json would take each of these for the field: never billing.
			{name: "an id beside its upper-case twin", body: fmt.Sprintf(`{"id":%q,"ID":%q,"type":"RuleActivated","occurredAt":1,"payload":{"orgId":%q,"ruleId":%q}}`, id, uuid.New(), org, rule),
				edit: func(r *http.Request) { r.Header.Set("Idempotency-Key", id.String()) }},
			{name: "a type beside a Type", body: fmt.Sprintf(`{"id":%q,"type":"RuleActivated","Type":"RuleDeactivated","occurredAt":1,"payload":{"orgId":%q,"ruleId":%q}}`, id, org, rule)},
			{name: "a Type instead of type", body: fmt.Sprintf(`{"id":%q,"Type":"RuleActivated","occurredAt":1,"payload":{"orgId":%q,"ruleId":%q}}`, id, org, rule)},
			{name: "an occurredat beside occurredAt", body: fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":1,"occurredat":2,"payload":{"orgId":%q,"ruleId":%q}}`, id, org, rule)},
			{name: "a Payload instead of payload", body: fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":1,"Payload":{"orgId":%q,"ruleId":%q}}`, id, org, rule)},
			{name: "a missing id", body: fmt.Sprintf(`{"type":"RuleActivated","occurredAt":1,"payload":{"orgId":%q,"ruleId":%q}}`, org, rule)},
			{name: "an id that is not a UUID", body: fmt.Sprintf(`{"id":"42","type":"RuleActivated","occurredAt":1,"payload":{"orgId":%q,"ruleId":%q}}`, org, rule)},
			{name: "a braced UUID id", body: fmt.Sprintf(`{"id":"{%s}","type":"RuleActivated","occurredAt":1,"payload":{"orgId":%q,"ruleId":%q}}`, id, org, rule)},
			{name: "an id that is a number", body: fmt.Sprintf(`{"id":7,"type":"RuleActivated","occurredAt":1,"payload":{"orgId":%q,"ruleId":%q}}`, org, rule)},
			{name: "a missing type", body: fmt.Sprintf(`{"id":%q,"occurredAt":1,"payload":{"orgId":%q,"ruleId":%q}}`, id, org, rule)},
			{name: "an empty type", body: fmt.Sprintf(`{"id":%q,"type":"","occurredAt":1,"payload":{}}`, id)},
			{name: "a missing occurredAt", body: fmt.Sprintf(`{"id":%q,"type":"RuleActivated","payload":{"orgId":%q,"ruleId":%q}}`, id, org, rule)},
			{name: "a zero occurredAt", body: fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":0,"payload":{"orgId":%q,"ruleId":%q}}`, id, org, rule)},
			{name: "a negative occurredAt", body: fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":-5,"payload":{"orgId":%q,"ruleId":%q}}`, id, org, rule)},
			{name: "a fractional occurredAt", body: fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":1.5,"payload":{"orgId":%q,"ruleId":%q}}`, id, org, rule)},
			{name: "an occurredAt string", body: fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":"1","payload":{"orgId":%q,"ruleId":%q}}`, id, org, rule)},
			{name: "a missing payload", body: fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":1}`, id)},
			{name: "a payload that is not an object", body: env(`[1]`)},
			{name: "a null payload", body: env(`null`)},
			{name: "a payload without orgId", body: env(`{"ruleId":"` + rule.String() + `"}`)},
			{name: "a payload without ruleId", body: env(`{"orgId":"` + org.String() + `"}`)},
			{name: "a payload orgId that is not a UUID", body: env(`{"orgId":"acme","ruleId":"` + rule.String() + `"}`)},
			{name: "a payload ruleId that is not a UUID", body: env(`{"orgId":"` + org.String() + `","ruleId":"x"}`)},
			{name: "a payload orgId that is a number", body: env(`{"orgId":1,"ruleId":"` + rule.String() + `"}`)},
			{name: "an Idempotency-Key of another event", body: env(`{"orgId":"` + org.String() + `","ruleId":"` + rule.String() + `"}`),
				edit: func(r *http.Request) { r.Header.Set("Idempotency-Key", uuid.NewString()) }},
			{name: "an Idempotency-Key that is not a UUID", body: env(`{"orgId":"` + org.String() + `","ruleId":"` + rule.String() + `"}`),
				edit: func(r *http.Request) { r.Header.Set("Idempotency-Key", "abc") }},
			{name: "an unknown type with a malformed envelope", body: `{"id":"nope","type":"RuleRenamed","occurredAt":1,"payload":{}}`},
			{name: "a body over 64 KiB", status: http.StatusRequestEntityTooLarge,
				body: env(`{"orgId":"` + org.String() + `","ruleId":"` + rule.String() + `","pad":"` + strings.Repeat("x", 70<<10) + `"}`)},
		}
		for _, tc := range cases {
			t.Run(tc.name+" answers 4xx and changes nothing", func(t *testing.T) {
				t.Parallel()
				b := setup(t, freshDB(t, d))
				var edits []func(*http.Request)
				if tc.edit != nil {
					edits = append(edits, tc.edit)
				}
				rec := b.deliver(t, tc.body, edits...)
				want := tc.status
				if want == 0 {
					want = http.StatusBadRequest
				}
				require.Equal(t, want, rec.Code, rec.Body.String())
				code := errorCode(t, rec)
				if want == http.StatusBadRequest {
					require.Equal(t, "invalid", code)
				}
				require.Zero(t, b.count(t, "billing_receipts"))
				require.Zero(t, b.count(t, "billing_quota"))
			})
		}

		t.Run("unknown payload fields are ignored, as payloads evolve additively", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			rec := b.deliver(t, env(`{"orgId":"`+org.String()+`","ruleId":"`+rule.String()+`","name":"later field"}`))
			require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
			require.EqualValues(t, 1, *b.activeRules(t, org))
		})

		t.Run("unknown envelope fields are ignored, as the envelope grows: the event applies once", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			body := fmt.Sprintf(`{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","id":%q,"type":"RuleActivated",`+
				`"occurredAt":1767225600000,"payload":{"orgId":%q,"ruleId":%q},"source":{"service":"labeling","version":[2,1]}}`, id, org, rule)
			for range 3 {
				rec := b.deliver(t, body)
				require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
			}
			require.EqualValues(t, 1, *b.activeRules(t, org))
			require.Equal(t, 1, b.count(t, "billing_receipts"))
		})

		t.Run("a delivery without Idempotency-Key is keyed by its body id", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			body := env(`{"orgId":"` + org.String() + `","ruleId":"` + rule.String() + `"}`)
			noKey := func(r *http.Request) { r.Header.Del("Idempotency-Key") }
			require.Equal(t, http.StatusNoContent, b.deliver(t, body, noKey).Code)
			require.Equal(t, http.StatusNoContent, b.deliver(t, body, noKey).Code)
			require.EqualValues(t, 1, *b.activeRules(t, org))
		})

		t.Run("an upper-case id and key name the same event", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			upper := strings.ToUpper(id.String())
			body := fmt.Sprintf(`{"id":%q,"type":"RuleActivated","occurredAt":1,"payload":{"orgId":%q,"ruleId":%q}}`, upper, org, rule)
			require.Equal(t, http.StatusNoContent, b.deliver(t, body).Code)
			require.Equal(t, http.StatusNoContent, b.deliver(t, env(`{"orgId":"`+org.String()+`","ruleId":"`+rule.String()+`"}`)).Code)
			require.EqualValues(t, 1, *b.activeRules(t, org))
		})
	})
}

func TestDeliverUnauthorized(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		cases := []struct{ name, header string }{
			{"a missing token", ""},
			{"a wrong token", "Bearer not-the-token"},
			{"a prefix of the token", "Bearer " + token[:len(token)-1]},
			{"the token with a suffix", "Bearer " + token + "x"},
			{"the Basic scheme", "Basic " + token},
			{"a scheme with no token", "Bearer"},
			{"an empty Bearer token", "Bearer "},
			{"the token with no scheme", token},
		}
		for _, tc := range cases {
			t.Run(tc.name+" answers 401 and changes nothing", func(t *testing.T) {
				t.Parallel()
				b := setup(t, freshDB(t, d))
				ev := newEvent(billing.RuleActivated, uuid.New())
				rec := b.deliver(t, ev.body(), func(r *http.Request) {
					if tc.header == "" {
						r.Header.Del("Authorization")
					} else {
						r.Header.Set("Authorization", tc.header)
					}
				})
				require.Equal(t, http.StatusUnauthorized, rec.Code, rec.Body.String())
				require.Equal(t, "unauthorized", errorCode(t, rec))
				require.Contains(t, rec.Header().Get("WWW-Authenticate"), "Bearer")
				require.NotContains(t, rec.Body.String(), token)
				require.Zero(t, b.count(t, "billing_receipts"))
				require.Zero(t, b.count(t, "billing_quota"))
			})
		}

		t.Run("the token is checked before the body", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			rec := b.deliver(t, `{not json`, func(r *http.Request) { r.Header.Del("Authorization") })
			require.Equal(t, http.StatusUnauthorized, rec.Code)
		})

		t.Run("the scheme is case-insensitive", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			ev := newEvent(billing.RuleActivated, uuid.New())
			rec := b.deliver(t, ev.body(), func(r *http.Request) { r.Header.Set("Authorization", "bearer "+token) })
			require.Equal(t, http.StatusNoContent, rec.Code, rec.Body.String())
		})

		t.Run("a handler without a token cannot be built", func(t *testing.T) {
			t.Parallel()
			_, err := billing.NewHandler(nil, billing.Config{})
			require.ErrorContains(t, err, "EVENTS_TOKEN")
		})
	})
}

func TestDeliverUnknownType(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("an unknown type answers 501 and writes no receipt", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			ev := newEvent("RuleRenamed", uuid.New())
			rec := b.deliver(t, ev.body())
			require.Equal(t, http.StatusNotImplemented, rec.Code, rec.Body.String())
			require.Equal(t, "not_implemented", errorCode(t, rec))
			require.False(t, b.hasReceipt(t, ev.ID))
			require.Zero(t, b.count(t, "billing_quota"))
		})

		t.Run("an unknown type's payload is not checked", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			rec := b.deliver(t, fmt.Sprintf(`{"id":%q,"type":"OrgCreated","occurredAt":1,"payload":{"anything":[1,2]}}`, uuid.New()))
			require.Equal(t, http.StatusNotImplemented, rec.Code, rec.Body.String())
			require.Zero(t, b.count(t, "billing_receipts"))
		})

		t.Run("type names are case-sensitive", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			ev := newEvent("ruleactivated", uuid.New())
			require.Equal(t, http.StatusNotImplemented, b.deliver(t, ev.body()).Code)
		})
	})
}

// unreachable is a pool on a port where no database listens.
func unreachable(t *testing.T) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://billing:secret-pw@127.0.0.1:1/billing?sslmode=disable&connect_timeout=2")
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

func TestDatabaseDown(t *testing.T) {
	t.Parallel()

	leaks := []string{"127.0.0.1", "dial", "connect", "secret-pw", "billing_", "refused"}

	t.Run("an event delivery answers 503 and leaks nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, onPool(unreachable(t)))
		rec := b.deliver(t, newEvent(billing.RuleActivated, uuid.New()).body())
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
		require.Equal(t, "unavailable", errorCode(t, rec))
		for _, s := range leaks {
			require.NotContains(t, rec.Body.String(), s)
		}
	})

	t.Run("a quota read answers 503 and leaks nothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t, onPool(unreachable(t)))
		rec := b.quotaHTTP(t, uuid.NewString())
		require.Equal(t, http.StatusServiceUnavailable, rec.Code, rec.Body.String())
		for _, s := range leaks {
			require.NotContains(t, rec.Body.String(), s)
		}
	})

	t.Run("bad input is still 400 and a bad token still 401", func(t *testing.T) {
		t.Parallel()
		b := setup(t, onPool(unreachable(t)))
		require.Equal(t, http.StatusBadRequest, b.deliver(t, `{}`).Code)
		require.Equal(t, http.StatusUnauthorized, b.deliver(t, `{}`, func(r *http.Request) { r.Header.Del("Authorization") }).Code)
		require.Equal(t, http.StatusNotImplemented, b.deliver(t, newEvent("Other", uuid.New()).body()).Code)
	})
}

func TestContention(t *testing.T) {
	t.Parallel()

	t.Run("50 different events for one org at once all apply with no 5xx", func(t *testing.T) {
		t.Parallel()
		b := setup(t, freshDB(t, sqldb.Postgres))
		org := uuid.New()
		codes := deliverAll(t, b, 50, func(int) string { return newEvent(billing.RuleActivated, org).body() })
		for i, c := range codes {
			require.Equal(t, http.StatusNoContent, c, "delivery %d", i)
		}
		require.EqualValues(t, 50, *b.activeRules(t, org))
		require.Equal(t, 50, b.count(t, "billing_receipts"))
	})

	t.Run("activations and deactivations at once sum exactly", func(t *testing.T) {
		t.Parallel()
		b := setup(t, freshDB(t, sqldb.Postgres))
		org := uuid.New()
		evs := make([]event, 50)
		for i := range evs {
			typ := billing.RuleActivated
			if i%5 == 0 {
				typ = billing.RuleDeactivated
			}
			evs[i] = newEvent(typ, org)
		}
		// Every event twice, all at once: 100 deliveries, 50 applications.
		codes := deliverAll(t, b, 100, func(i int) string { return evs[i%50].body() })
		for i, c := range codes {
			require.Equal(t, http.StatusNoContent, c, "delivery %d", i)
		}
		require.EqualValues(t, 40-10, *b.activeRules(t, org))
	})
}

func TestQuota(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		quota := func(t *testing.T, b *bundle, org string) billing.QuotaBody {
			t.Helper()
			rec := b.quotaHTTP(t, org)
			require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
			require.Contains(t, rec.Header().Get("Content-Type"), "application/json")
			var q billing.QuotaBody
			dec := json.NewDecoder(rec.Body)
			dec.DisallowUnknownFields()
			require.NoError(t, dec.Decode(&q))
			return q
		}

		t.Run("an org never seen has 0 active rules", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			require.Equal(t, billing.QuotaBody{OrgID: org.String(), ActiveRules: 0}, quota(t, b, org.String()))
		})

		t.Run("the quota counts activations minus deactivations of its org only", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org, other := uuid.New(), uuid.New()
			for _, ev := range []event{
				newEvent(billing.RuleActivated, org), newEvent(billing.RuleActivated, org),
				newEvent(billing.RuleDeactivated, org), newEvent(billing.RuleActivated, other),
			} {
				require.Equal(t, http.StatusNoContent, b.deliver(t, ev.body()).Code)
			}
			require.EqualValues(t, 1, quota(t, b, org.String()).ActiveRules)
			require.EqualValues(t, 1, quota(t, b, other.String()).ActiveRules)
		})

		t.Run("a deactivation before its activation goes negative and then converges", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			deact, act := newEvent(billing.RuleDeactivated, org), newEvent(billing.RuleActivated, org)
			require.Equal(t, http.StatusNoContent, b.deliver(t, deact.body()).Code)
			require.EqualValues(t, -1, quota(t, b, org.String()).ActiveRules)
			require.Equal(t, http.StatusNoContent, b.deliver(t, act.body()).Code)
			require.EqualValues(t, 0, quota(t, b, org.String()).ActiveRules)
		})

		t.Run("an upper-case org id answers in canonical form", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			require.Equal(t, org.String(), quota(t, b, strings.ToUpper(org.String())).OrgID)
		})

		for _, bad := range []string{"acme", "1", uuid.NewString() + "0", "{" + uuid.NewString() + "}", strings.ReplaceAll(uuid.NewString(), "-", "")} {
			t.Run(fmt.Sprintf("org id %q answers 400", bad), func(t *testing.T) {
				t.Parallel()
				b := setup(t, freshDB(t, d))
				rec := b.quotaHTTP(t, bad)
				require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
				require.Equal(t, "invalid", errorCode(t, rec))
			})
		}
	})
}

func TestApply(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("reports applied for a new event and not for a redelivery", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			ev := billing.Event{ID: uuid.Must(uuid.NewV7()), Type: billing.RuleActivated, OccurredAt: 1, Value: billing.Effect{OrgID: uuid.New(), Delta: 1}}
			applied, err := b.svc.Apply(context.Background(), ev)
			require.NoError(t, err)
			require.True(t, applied)
			applied, err = b.svc.Apply(context.Background(), ev)
			require.NoError(t, err)
			require.False(t, applied)
			q, err := b.svc.Quota(context.Background(), ev.Value.OrgID)
			require.NoError(t, err)
			require.Equal(t, billing.Quota{OrgID: ev.Value.OrgID, ActiveRules: 1}, q)
		})
	})
}

// statements counts the statements a pool sends, by their text.
type statements struct {
	mu   sync.Mutex
	sent []string
}

func (s *statements) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, strings.TrimSpace(d.SQL))
	return ctx
}

func (s *statements) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (s *statements) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.sent
	s.sent = nil
	return out
}

func TestApplyStatements(t *testing.T) {
	t.Parallel()

	t.Run("a lone event is one statement, with no BEGIN or COMMIT around it, and a redelivery too", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t, migrations.Billing)
		cfg, err := pgxpool.ParseConfig(db.URL)
		require.NoError(t, err)
		trace := &statements{}
		cfg.ConnConfig.Tracer = trace
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		b := setup(t, onPool(pool))
		ev := billing.Event{ID: uuid.Must(uuid.NewV7()), Type: billing.RuleActivated, OccurredAt: 1, Value: billing.Effect{OrgID: uuid.New(), Delta: 1}}
		for _, want := range []bool{true, false} {
			applied, err := b.svc.Apply(context.Background(), ev)
			require.NoError(t, err)
			require.Equal(t, want, applied)
			sent := trace.take()
			require.Len(t, sent, 1, "%q", sent)
			require.True(t, strings.HasPrefix(sent[0], "WITH"), sent[0])
		}
		require.EqualValues(t, 1, *b.activeRules(t, ev.Value.OrgID))
	})

	t.Run("on the simple path a lone event is a transaction of the receipts' insert, the quota upsert and the QuotaChanged row", func(t *testing.T) {
		t.Parallel()
		db := pgtest.New(t, migrations.Billing)
		cfg, err := pgxpool.ParseConfig(db.URL)
		require.NoError(t, err)
		trace := &statements{}
		cfg.ConnConfig.Tracer = trace
		pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		b := setup(t, onPool(pool), billing.SimplePath())
		ev := billing.Event{ID: uuid.Must(uuid.NewV7()), Type: billing.RuleActivated, OccurredAt: 1, Value: billing.Effect{OrgID: uuid.New(), Delta: 1}}
		applied, err := b.svc.Apply(context.Background(), ev)
		require.NoError(t, err)
		require.True(t, applied)
		sent := trace.take()
		require.Len(t, sent, 5, "%q", sent)
		require.Equal(t, "begin", sent[0])
		require.Contains(t, sent[1], "INSERT INTO billing_receipts")
		require.Contains(t, sent[2], "INSERT INTO billing_quota")
		require.Contains(t, sent[3], "INSERT INTO billing_outbox_events")
		require.Equal(t, "commit", sent[4])

		applied, err = b.svc.Apply(context.Background(), ev)
		require.NoError(t, err)
		require.False(t, applied)
		require.Len(t, trace.take(), 3, "a redelivery inserts no receipt and runs no effect: begin, the receipts' insert, commit")
		require.EqualValues(t, 1, *b.activeRules(t, ev.Value.OrgID))
	})
}

func TestReceiptsRetention(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {

		t.Run("the policy names billing_receipts and keeps them for the configured time", func(t *testing.T) {
			t.Parallel()
			p := billing.ReceiptsRetention(billing.Config{ReceiptsRetention: 720 * time.Hour}, postgres.NewDB(nil))
			require.Equal(t, "billing_receipts", p.Name)
			require.Equal(t, 720*time.Hour, p.Keep)
		})

		t.Run("deletes only receipts older than the cut, at most limit at a time", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			ctx := context.Background()
			const cut = int64(1_000_000)
			var old, young []uuid.UUID
			for i := range 5 {
				old = append(old, uuid.New())
				young = append(young, uuid.New())
				b.db.Exec(t, `INSERT INTO billing_receipts (event_id, created_at) VALUES ($1, $2), ($3, $4)`,
					old[i], cut-1-int64(i), young[i], cut+int64(i))
			}
			p := billing.ReceiptsRetention(billing.Config{ReceiptsRetention: time.Hour}, b.db.DB)

			n, err := p.Delete(ctx, cut, 2)
			require.NoError(t, err)
			require.EqualValues(t, 2, n)
			n, err = p.Delete(ctx, cut, 100)
			require.NoError(t, err)
			require.EqualValues(t, 3, n)
			n, err = p.Delete(ctx, cut, 100)
			require.NoError(t, err)
			require.Zero(t, n)

			for _, id := range old {
				require.False(t, b.hasReceipt(t, id.String()))
			}
			for _, id := range young {
				require.True(t, b.hasReceipt(t, id.String()))
			}
		})

		t.Run("an event whose receipt is still kept is not applied again", func(t *testing.T) {
			t.Parallel()
			b := setup(t, freshDB(t, d))
			org := uuid.New()
			ev := newEvent(billing.RuleActivated, org)
			require.Equal(t, http.StatusNoContent, b.deliver(t, ev.body()).Code)
			p := billing.ReceiptsRetention(billing.Config{ReceiptsRetention: 720 * time.Hour}, b.db.DB)
			before := time.Now().Add(-p.Keep).UnixMilli()
			n, err := p.Delete(context.Background(), before, 100)
			require.NoError(t, err)
			require.Zero(t, n)
			require.Equal(t, http.StatusNoContent, b.deliver(t, ev.body()).Code)
			require.EqualValues(t, 1, *b.activeRules(t, org))
		})
	})
}

// Package inboxtest gives a test of a consumer built on infra/inbox its
// setup, typed by the consumer's value: one Env per test function (New), the
// consumer's tables created as a team's migrations create them (Tables), and
// deliveries as a producer sends them (Request, Envelope).
package inboxtest

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// Token is the events token of every Env and Request.
const Token = "test-events-token"

// Path is where an Env serves its intake (contract section 4's endpoint).
const Path = "/internal/v1/events"

// Env is one test's consumer: its Inbox on DB, with the HTTP intake behind
// Token served by Echo at Path.
type Env[V any] struct {
	DB    *dbtest.DB
	Inbox *inbox.Inbox[V]
	Echo  *echo.Echo
}

// New returns c's inbox on db with opts, and its intake.
func New[V any](t testing.TB, db *dbtest.DB, c inbox.Consumer[V], opts ...inbox.Option) *Env[V] {
	t.Helper()
	logger := slog.New(slog.DiscardHandler)
	ib := inbox.New(db.DB, logger, c, opts...)
	in, err := inbox.NewIntake(ib, Token, "")
	require.NoError(t, err)
	e := web.New(logger, db.DB)
	e.POST(Path, in.Deliver)
	return &Env[V]{DB: db, Inbox: ib, Echo: e}
}

// Deliver POSTs body to the intake as a producer does (Request).
func (env *Env[V]) Deliver(t testing.TB, body string, edit ...func(*http.Request)) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	env.Echo.ServeHTTP(rec, Request(body, edit...))
	return rec
}

// Request is a delivery of body as labeling's relay sends it (Bearer Token,
// JSON, the body's id as Idempotency-Key when it has one), edited by edit.
func Request(body string, edit ...func(*http.Request)) *http.Request {
	req := httptest.NewRequest(http.MethodPost, Path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+Token)
	var probe struct{ ID string }
	if json.Unmarshal([]byte(body), &probe) == nil && probe.ID != "" {
		req.Header.Set("Idempotency-Key", probe.ID)
	}
	for _, f := range edit {
		f(req)
	}
	return req
}

// Envelope is the delivery body of an event of typ with payload (a JSON
// object), occurred now.
func Envelope(id uuid.UUID, typ, payload string) string {
	return fmt.Sprintf(`{"id":%q,"type":%q,"occurredAt":%d,"payload":%s}`, id, typ, time.Now().UnixMilli(), payload)
}

// Tables creates a consumer's receipts and NATS-failed tables on db, as the
// migrations docs/adopting.md gives to copy create them.
func Tables(t testing.TB, db *dbtest.DB, receipts, natsFailed string) {
	t.Helper()
	for _, stmt := range DDL(db.Dialect(), receipts, natsFailed) {
		db.Exec(t, stmt)
	}
}

// DDL is the statements that create a consumer's receipts and NATS-failed
// tables in dialect d: billing's, in their form after its last migration
// (the NATS-failed table's tally, NAME_size, and its triggers included).
func DDL(d sqldb.Dialect, receipts, natsFailed string) []string {
	if d == sqldb.SQLite {
		return []string{
			fmt.Sprintf(`CREATE TABLE %s (event_id TEXT PRIMARY KEY, created_at INTEGER NOT NULL)`, receipts),
			fmt.Sprintf(`CREATE INDEX %[1]s_created_at_idx ON %[1]s (created_at)`, receipts),
			fmt.Sprintf(`CREATE TABLE %s (
				id INTEGER PRIMARY KEY AUTOINCREMENT, stream_seq INTEGER NOT NULL,
				subject BLOB NOT NULL, msg_id BLOB NOT NULL, payload BLOB NOT NULL, reason TEXT NOT NULL,
				deliveries INTEGER NOT NULL, failed_at INTEGER NOT NULL, stored_at INTEGER NOT NULL DEFAULT 0, signature BLOB,
				verified INTEGER NOT NULL DEFAULT 0)`, natsFailed),
			fmt.Sprintf(`CREATE UNIQUE INDEX %[1]s_message ON %[1]s (stream_seq, stored_at)`, natsFailed),
			fmt.Sprintf(`CREATE INDEX %[1]s_unverified ON %[1]s (id) WHERE NOT verified`, natsFailed),
			fmt.Sprintf(`CREATE TABLE %s_size (one INTEGER PRIMARY KEY DEFAULT 1 CHECK (one = 1), records INTEGER NOT NULL, bytes INTEGER NOT NULL)`, natsFailed),
			fmt.Sprintf(`INSERT INTO %s_size (records, bytes) VALUES (0, 0)`, natsFailed),
			fmt.Sprintf(`CREATE TRIGGER %[1]s_sized_insert AFTER INSERT ON %[1]s BEGIN
				UPDATE %[1]s_size SET records = records + 1, bytes = bytes + length(NEW.payload); END`, natsFailed),
			fmt.Sprintf(`CREATE TRIGGER %[1]s_sized_delete AFTER DELETE ON %[1]s BEGIN
				UPDATE %[1]s_size SET records = records - 1, bytes = bytes - length(OLD.payload); END`, natsFailed),
		}
	}
	return []string{
		fmt.Sprintf(`CREATE TABLE %s (event_id uuid PRIMARY KEY, created_at bigint NOT NULL)`, receipts),
		fmt.Sprintf(`CREATE INDEX %[1]s_created_at_idx ON %[1]s (created_at)`, receipts),
		fmt.Sprintf(`CREATE TABLE %s (
			id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, stream_seq bigint NOT NULL,
			subject bytea NOT NULL, msg_id bytea NOT NULL, payload bytea NOT NULL, reason text NOT NULL,
			deliveries bigint NOT NULL, failed_at bigint NOT NULL, stored_at bigint NOT NULL DEFAULT 0, signature bytea,
			verified boolean NOT NULL DEFAULT false)`, natsFailed),
		fmt.Sprintf(`CREATE UNIQUE INDEX %[1]s_message ON %[1]s (stream_seq, stored_at)`, natsFailed),
		fmt.Sprintf(`CREATE INDEX %[1]s_unverified ON %[1]s (id) WHERE NOT verified`, natsFailed),
		fmt.Sprintf(`CREATE TABLE %s_size (one boolean PRIMARY KEY DEFAULT true CHECK (one), records bigint NOT NULL, bytes bigint NOT NULL)`, natsFailed),
		fmt.Sprintf(`INSERT INTO %s_size (records, bytes) VALUES (0, 0)`, natsFailed),
		fmt.Sprintf(`CREATE FUNCTION %[1]s_sized() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF TG_OP = 'INSERT' THEN
				UPDATE %[1]s_size SET records = records + d.n, bytes = bytes + d.b
				FROM (SELECT count(*) AS n, coalesce(sum(length(payload)), 0) AS b FROM new_rows) d WHERE d.n > 0;
			ELSIF TG_OP = 'DELETE' THEN
				UPDATE %[1]s_size SET records = records - d.n, bytes = bytes - d.b
				FROM (SELECT count(*) AS n, coalesce(sum(length(payload)), 0) AS b FROM old_rows) d WHERE d.n > 0;
			ELSE
				UPDATE %[1]s_size SET records = 0, bytes = 0;
			END IF;
			RETURN NULL;
		END
		$$`, natsFailed),
		fmt.Sprintf(`CREATE TRIGGER %[1]s_sized_insert AFTER INSERT ON %[1]s
			REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION %[1]s_sized()`, natsFailed),
		fmt.Sprintf(`CREATE TRIGGER %[1]s_sized_delete AFTER DELETE ON %[1]s
			REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION %[1]s_sized()`, natsFailed),
		fmt.Sprintf(`CREATE TRIGGER %[1]s_sized_truncate AFTER TRUNCATE ON %[1]s
			FOR EACH STATEMENT EXECUTE FUNCTION %[1]s_sized()`, natsFailed),
	}
}

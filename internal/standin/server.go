package standin

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// maxBody bounds a call's body, as billing bounds its intake's.
const maxBody = 64 << 10

// schema is the stand-in's database: the keys it applied, with what each
// applied (the dedup record and the effect's history in one row), the latest
// count of each org, and the duplicates it absorbed. CREATE ... IF NOT EXISTS:
// a stand-in has no migrations (a file from before the version columns gets
// them in Open: versionColumns).
const schema = `
CREATE TABLE IF NOT EXISTS provider_applied (
    idempotency_key TEXT    PRIMARY KEY,
    org_id          TEXT    NOT NULL,
    active_rules    INTEGER NOT NULL,
    occurred_at     INTEGER NOT NULL,
    event_id        TEXT    NOT NULL,
    applied_at      INTEGER NOT NULL,
    version         INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS provider_orgs (
    org_id       TEXT    PRIMARY KEY,
    active_rules INTEGER NOT NULL,
    occurred_at  INTEGER NOT NULL,
    event_id     TEXT    NOT NULL,
    version      INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS provider_counters (
    name TEXT    PRIMARY KEY,
    n    INTEGER NOT NULL
);
INSERT INTO provider_counters (name, n) VALUES ('duplicates', 0) ON CONFLICT (name) DO NOTHING;`

// Server is the stand-in's HTTP handler over its database.
type Server struct {
	db       *sqlite.DB
	commits  *committer // the one writer: group commit of the calls' keys and effects
	verifier *standardwebhooks.Webhook
	logger   *slog.Logger
	failEach int

	calls    atomic.Int64 // calls with a valid signature, for FailEvery
	rejected atomic.Int64 // since start
	injected atomic.Int64 // since start
}

// Open opens (and creates) the stand-in's database and returns its server.
// Close it with Close.
func Open(ctx context.Context, cfg Config, logger *slog.Logger) (*Server, error) {
	verifier, err := standardwebhooks.NewWebhook(cfg.Secret)
	if err != nil {
		return nil, fmt.Errorf("PROVIDER_SECRET: %w", err)
	}
	db, err := sqlite.Open(ctx, "sqlite:"+cfg.DB, sqldb.Bounds{StatementTimeout: 5 * time.Second, LockTimeout: 5 * time.Second})
	if err != nil {
		return nil, fmt.Errorf("PROVIDER_DB: %w", err)
	}
	err = db.InTx(ctx, sqldb.TxOptions{}, func(tx sqlite.Tx) error {
		if _, err := tx.Exec(ctx, schema); err != nil {
			return err
		}
		return versionColumns(ctx, tx)
	})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("PROVIDER_DB: create the tables: %w", err)
	}
	return &Server{db: db, commits: newCommitter(db), verifier: verifier, logger: logger, failEach: cfg.FailEvery}, nil
}

// versionColumns adds the version columns to the tables of a file created
// before them, its rows at version 0 (unversioned, as the calls of a billing
// before its migration 00006 are).
func versionColumns(ctx context.Context, tx sqlite.Tx) error {
	for _, table := range []string{"provider_applied", "provider_orgs"} {
		var n int
		err := tx.QueryRow(ctx, `SELECT count(*) FROM pragma_table_info(?1) WHERE name = 'version'`, table).Scan(&n)
		if err != nil {
			return err
		}
		if n == 0 {
			// table is one of the two names above, never input.
			if _, err := tx.Exec(ctx, `ALTER TABLE `+table+` ADD COLUMN version INTEGER NOT NULL DEFAULT 0`); err != nil {
				return err
			}
		}
	}
	return nil
}

// Close stops taking calls (a call that comes later is answered 503, having
// applied nothing), waits for the group commit in progress, and closes the
// database.
func (s *Server) Close() error {
	s.commits.close()
	return s.db.Close()
}

// Handler serves POST /webhook, GET /applied and GET /healthz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+Path, s.receive)
	mux.HandleFunc("GET /applied", s.applied)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	return mux
}

// call is the envelope billing's outbox sends (contract section 4's shape)
// with a QuotaChanged payload.
type call struct {
	ID         uuid.UUID `json:"id"`
	Type       string    `json:"type"`
	OccurredAt int64     `json:"occurredAt"`
	Payload    struct {
		OrgID       *uuid.UUID `json:"orgId"`
		ActiveRules *int64     `json:"activeRules"`
		// Version orders the org's changes (contract section 10); absent in
		// the rows billing appended before its migration 00006: 0.
		Version *int64 `json:"version"`
	} `json:"payload"`
}

// receive verifies, then applies the call once per Idempotency-Key through the
// group commit (committer) and answers only after the commit.
func (s *Server) receive(w http.ResponseWriter, r *http.Request) {
	// The body is checked before a byte of it is read, as both services check
	// theirs (web.Bodies): a Content-Type, when sent, must be JSON (billing
	// sends application/json), so a form or multipart body is never parsed,
	// and a Content-Length over the bound is refused unread.
	if ct := r.Header.Get("Content-Type"); ct != "" {
		if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
			answer(w, http.StatusUnsupportedMediaType, "Content-Type must be application/json")
			return
		}
	}
	if r.ContentLength > maxBody {
		answer(w, http.StatusRequestEntityTooLarge, "body over 64 KiB")
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		answer(w, http.StatusRequestEntityTooLarge, "body over 64 KiB")
		return
	case err != nil:
		answer(w, http.StatusBadRequest, "body: "+err.Error())
		return
	}
	// The library checks the signature (constant-time) and the timestamp's
	// tolerance (5 minutes): a replay of an old call is refused too.
	if err := s.verifier.Verify(body, r.Header); err != nil {
		s.rejected.Add(1)
		s.logger.Warn("call refused: signature", "err", err)
		answer(w, http.StatusUnauthorized, "signature: "+err.Error())
		return
	}
	key := r.Header.Get("Idempotency-Key")
	if key == "" || len(key) > 200 {
		answer(w, http.StatusBadRequest, "Idempotency-Key: required (at most 200 characters)")
		return
	}
	var c call
	if err := json.Unmarshal(body, &c); err != nil || c.Type != "QuotaChanged" || c.Payload.OrgID == nil || c.Payload.ActiveRules == nil || c.OccurredAt <= 0 ||
		(c.Payload.Version != nil && *c.Payload.Version < 1) {
		answer(w, http.StatusBadRequest, `want {"id","type":"QuotaChanged","occurredAt","payload":{"orgId","activeRules","version"}}, version 1 or more when present`)
		return
	}
	var version int64 // unversioned: a row appended before billing's migration 00006
	if c.Payload.Version != nil {
		version = *c.Payload.Version
	}
	n := s.calls.Add(1)
	duplicate, err := s.commits.apply(r.Context(), &receipt{
		key: key, org: c.Payload.OrgID.String(), count: *c.Payload.ActiveRules, occurredAt: c.OccurredAt,
		eventID: c.ID.String(), version: version, appliedAt: time.Now().UnixMilli(),
	})
	if err != nil {
		s.logger.Error("call not applied", "key", key, "err", err)
		msg := "not applied: the database failed"
		if errors.Is(err, errStopped) {
			msg = "not applied: the stand-in is stopping"
		}
		answer(w, http.StatusServiceUnavailable, msg)
		return
	}
	s.logger.Info(map[bool]string{false: "quota change applied", true: "duplicate absorbed"}[duplicate],
		"key", key, "org", c.Payload.OrgID.String(), "active_rules", *c.Payload.ActiveRules, "version", version,
		"attempt_ts", r.Header.Get("webhook-timestamp"))
	if s.failEach > 0 && n%int64(s.failEach) == 0 {
		s.injected.Add(1)
		answer(w, http.StatusServiceUnavailable, "injected failure (PROVIDER_FAIL_EVERY) after the commit")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]bool{"duplicate": duplicate})
}

// Applied is what GET /applied answers.
type Applied struct {
	Applied    int64            `json:"applied"`    // keys applied, each once (durable)
	Duplicates int64            `json:"duplicates"` // calls whose key was applied before (durable)
	ByOrg      map[string]int64 `json:"byOrg"`      // each org's count as of its highest version
	Versions   map[string]int64 `json:"versions"`   // each org's highest version (0: only unversioned calls)
	Rejected   int64            `json:"rejected"`   // calls refused for their signature, since start
	Injected   int64            `json:"injected"`   // failures answered by PROVIDER_FAIL_EVERY, since start
}

func (s *Server) applied(w http.ResponseWriter, r *http.Request) {
	out := Applied{ByOrg: map[string]int64{}, Versions: map[string]int64{}, Rejected: s.rejected.Load(), Injected: s.injected.Load()}
	err := s.db.InTx(r.Context(), sqldb.TxOptions{ReadOnly: true}, func(tx sqlite.Tx) error {
		if err := tx.QueryRow(r.Context(), `SELECT (SELECT count(*) FROM provider_applied),
			(SELECT n FROM provider_counters WHERE name = 'duplicates')`).Scan(&out.Applied, &out.Duplicates); err != nil {
			return err
		}
		rows, err := tx.Query(r.Context(), `SELECT org_id, active_rules, version FROM provider_orgs`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var org string
			var n, v int64
			if err := rows.Scan(&org, &n, &v); err != nil {
				return err
			}
			out.ByOrg[org], out.Versions[org] = n, v
		}
		return rows.Err()
	})
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		answer(w, http.StatusServiceUnavailable, "database: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(out)
}

func answer(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg+"\n")
}

// splitAddr is net.SplitHostPort with a port that must be a number.
func splitAddr(addr string) (string, string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err == nil && strings.Trim(port, "0123456789") != "" {
		err = errors.New("the port is not a number")
	}
	return host, port, err
}

// HealthURL is the /healthz URL of a stand-in listening on addr (wildcard
// hosts asked on loopback).
func HealthURL(addr string) (string, error) {
	host, port, err := splitAddr(addr)
	if err != nil {
		return "", fmt.Errorf("PROVIDER_ADDR: %q is not host:port: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/healthz", nil
}

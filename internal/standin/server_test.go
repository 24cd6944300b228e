package standin_test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/standin"
)

// stand is a stand-in in this process on its database file, with a signer
// of its secret.
type stand struct {
	t  *testing.T
	h  http.Handler
	wh *standardwebhooks.Webhook
}

// setup opens a stand-in on the file db (created when missing).
func setup(t *testing.T, db string) *stand {
	t.Helper()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	secret := "whsec_" + base64.StdEncoding.EncodeToString(key)
	srv, err := standin.Open(t.Context(), standin.Config{Secret: secret, DB: db}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	wh, err := standardwebhooks.NewWebhook(secret)
	require.NoError(t, err)
	return &stand{t: t, h: srv.Handler(), wh: wh}
}

// post signs body as billing does, under a fresh key, header overriding, and
// returns the status.
func (s *stand) post(body string, header map[string]string) int {
	s.t.Helper()
	id := uuid.NewString()
	now := time.Now()
	sig, err := s.wh.Sign(id, now, []byte(body))
	require.NoError(s.t, err)
	req := httptest.NewRequest(http.MethodPost, standin.Path, bytes.NewReader([]byte(body)))
	req.Header.Set("Idempotency-Key", id)
	req.Header.Set("webhook-id", id)
	req.Header.Set("webhook-timestamp", strconv.FormatInt(now.Unix(), 10))
	req.Header.Set("webhook-signature", sig)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, req)
	return rec.Code
}

// applied reads GET /applied.
func (s *stand) applied() standin.Applied {
	s.t.Helper()
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/applied", nil))
	require.Equal(s.t, http.StatusOK, rec.Code)
	var a standin.Applied
	require.NoError(s.t, json.Unmarshal(rec.Body.Bytes(), &a))
	return a
}

// change is a QuotaChanged call's body; version 0 leaves it out (a row
// appended before billing's migration 00006).
func change(org uuid.UUID, n, version, occurredAt int64) string {
	v := ""
	if version != 0 {
		v = fmt.Sprintf(`,"version":%d`, version)
	}
	return fmt.Sprintf(`{"id":%q,"type":"QuotaChanged","occurredAt":%d,"payload":{"orgId":%q,"activeRules":%d,"sourceEventId":%q%s}}`,
		uuid.Must(uuid.NewV7()), occurredAt, org, n, uuid.New(), v)
}

// TestRefusals: what the stand-in refuses, and that a refusal applies nothing.
func TestRefusals(t *testing.T) {
	t.Parallel()
	s := setup(t, filepath.Join(t.TempDir(), "p.db"))
	good := `{"id":"` + uuid.NewString() + `","type":"QuotaChanged","occurredAt":5,"payload":{"orgId":"` + uuid.NewString() + `","activeRules":0}}`
	for name, c := range map[string]struct {
		body   string
		header map[string]string
		want   int
	}{
		"another type":           {strings.Replace(good, "QuotaChanged", "RuleActivated", 1), nil, http.StatusBadRequest},
		"no count":               {strings.Replace(good, `,"activeRules":0`, "", 1), nil, http.StatusBadRequest},
		"a version of 0":         {strings.Replace(good, `"activeRules":0`, `"activeRules":0,"version":0`, 1), nil, http.StatusBadRequest},
		"a negative version":     {strings.Replace(good, `"activeRules":0`, `"activeRules":0,"version":-1`, 1), nil, http.StatusBadRequest},
		"a version not a number": {strings.Replace(good, `"activeRules":0`, `"activeRules":0,"version":"1"`, 1), nil, http.StatusBadRequest},
		"not JSON":               {"quota", nil, http.StatusBadRequest},
		"no key":                 {good, map[string]string{"Idempotency-Key": ""}, http.StatusBadRequest},
		"an old timestamp":       {good, map[string]string{"webhook-timestamp": strconv.FormatInt(time.Now().Add(-time.Hour).Unix(), 10)}, http.StatusUnauthorized},
		"no signature":           {good, map[string]string{"webhook-signature": ""}, http.StatusUnauthorized},
		"a body over 64 KiB":     {strings.Repeat(" ", 65<<10) + good, nil, http.StatusRequestEntityTooLarge},
	} {
		require.Equal(t, c.want, s.post(c.body, c.header), name)
	}
	require.Equal(t, http.StatusOK, s.post(good, nil), "the good call, for contrast")

	a := s.applied()
	require.EqualValues(t, 1, a.Applied, "no refusal applied anything")
	require.Zero(t, a.Duplicates)
	require.EqualValues(t, 2, a.Rejected)
}

// TestKeepsTheHighestVersion: an org's count is its highest version's,
// whatever the order of arrival or the calls' occurredAt; an unversioned call
// (appended before billing's migration 00006) counts only while the org has
// no versioned one, ordered among its kind by occurredAt, then id.
func TestKeepsTheHighestVersion(t *testing.T) {
	t.Parallel()
	s := setup(t, filepath.Join(t.TempDir(), "p.db"))
	org, old := uuid.New(), uuid.New()
	for _, c := range []struct {
		body string
		n    int64 // the org's count after it
	}{
		{change(org, 2, 2, 1000), 2},
		{change(org, 1, 1, 2000), 2}, // an older version stamped later: a replica that committed after
		{change(org, 3, 3, 500), 3},  // a newer version stamped earlier
		{change(org, 9, 0, 9000), 3}, // unversioned, newest occurredAt: the org has a versioned count
	} {
		require.Equal(t, http.StatusOK, s.post(c.body, nil))
		require.Equal(t, c.n, s.applied().ByOrg[org.String()], c.body)
	}
	for _, c := range []struct {
		body string
		n    int64
	}{
		{change(old, 5, 0, 2000), 5},
		{change(old, 4, 0, 1000), 5}, // unversioned and older: as before the version
		{change(old, 6, 0, 3000), 6},
		{change(old, 1, 1, 10), 1}, // the first versioned call wins over every unversioned one
		{change(old, 7, 0, 9000), 1},
	} {
		require.Equal(t, http.StatusOK, s.post(c.body, nil))
		require.Equal(t, c.n, s.applied().ByOrg[old.String()], c.body)
	}
	a := s.applied()
	require.Equal(t, map[string]int64{org.String(): 3, old.String(): 1}, a.Versions)
}

// TestOpensAFileFromBeforeTheVersion: a stand-in file created before the
// version columns gets them, its counts kept as unversioned, and a versioned
// call then wins.
func TestOpensAFileFromBeforeTheVersion(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "p.db")
	org := uuid.New()
	db, err := sqlite.Open(t.Context(), "sqlite:"+file, sqldb.Bounds{StatementTimeout: 5 * time.Second, LockTimeout: 5 * time.Second})
	require.NoError(t, err)
	err = db.InTx(t.Context(), sqldb.TxOptions{}, func(tx sqlite.Tx) error {
		_, err := tx.Exec(t.Context(), `
			CREATE TABLE provider_applied (idempotency_key TEXT PRIMARY KEY, org_id TEXT NOT NULL, active_rules INTEGER NOT NULL,
				occurred_at INTEGER NOT NULL, event_id TEXT NOT NULL, applied_at INTEGER NOT NULL);
			CREATE TABLE provider_orgs (org_id TEXT PRIMARY KEY, active_rules INTEGER NOT NULL, occurred_at INTEGER NOT NULL, event_id TEXT NOT NULL);
			INSERT INTO provider_applied VALUES ('k', ?1, 4, 5000, ?2, 5000);
			INSERT INTO provider_orgs VALUES (?1, 4, 5000, ?2);`, org.String(), uuid.NewString())
		return err
	})
	require.NoError(t, err)
	require.NoError(t, db.Close())

	s := setup(t, file)
	a := s.applied()
	require.EqualValues(t, 1, a.Applied)
	require.Equal(t, map[string]int64{org.String(): 4}, a.ByOrg)
	require.Equal(t, map[string]int64{org.String(): 0}, a.Versions, "kept as unversioned")
	require.Equal(t, http.StatusOK, s.post(change(org, 2, 0, 4000), nil))
	require.EqualValues(t, 4, s.applied().ByOrg[org.String()], "an older unversioned call changes nothing")
	require.Equal(t, http.StatusOK, s.post(change(org, 3, 1, 1), nil))
	require.EqualValues(t, 3, s.applied().ByOrg[org.String()], "the first versioned call wins")
}

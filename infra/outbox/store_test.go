package outbox_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

// claimAll runs one claim of store's relay statements and returns its rows.
func claimAll(t *testing.T, rs outbox.RelayStore, a outbox.ClaimArgs) []outbox.ClaimedRow {
	t.Helper()
	var got []outbox.ClaimedRow
	require.NoError(t, rs.Claim(context.Background(), a, func(c outbox.ClaimedRow) { got = append(got, c) }))
	return got
}

// TestStoreConformance is the table of the outbox.Store contract that every
// dialect's store passes, statement by statement.
func TestStoreConformance(t *testing.T) {
	t.Parallel()
	storeConformance(t, newDBOn, outbox.DefaultTable)
}

// TestStoreConformanceOnAnotherTable: the same table on a store built
// WithTable("billing_outbox_events"), in a billing database as its migration
// makes it, which holds no outbox_events: every statement of the store names
// the table it was built with (a statement left on outbox_events fails here).
func TestStoreConformanceOnAnotherTable(t *testing.T) {
	t.Parallel()
	storeConformance(t, func(t testing.TB, d sqldb.Dialect) *dbtest.DB {
		db := newBillingDBOn(t, d)
		require.Zero(t, db.Count(t, `SELECT count(*) FROM billing_quota`), "a billing database")
		return db
	}, billingOutbox)
}

// storeConformance runs the conformance table on both dialects, each case on
// a fresh database of newDBOn whose outbox is table. The helpers the cases
// call are shadowed by their twins on table, so the cases read the same on
// either.
func storeConformance(t *testing.T, newDBOn func(testing.TB, sqldb.Dialect) *dbtest.DB, table string) {
	storeOf := func(t testing.TB, db *dbtest.DB) outbox.Store { return storeOn(t, db, table) }
	getRow := func(t testing.TB, db *dbtest.DB, id uuid.UUID) row { return getRowIn(t, db, table, id) }
	allRows := func(t testing.TB, db *dbtest.DB) []row { return allRowsIn(t, db, table) }
	count := func(t testing.TB, db *dbtest.DB, where string, args ...any) int {
		return countIn(t, db, table, where, args...)
	}
	exec := func(t testing.TB, db *dbtest.DB, sql string, args ...any) { execIn(t, db, table, sql, args...) }
	appendEvents := func(t testing.TB, db *dbtest.DB, events ...outbox.Event) []uuid.UUID {
		return appendEventsIn(t, db, table, events...)
	}
	inAppendTx := func(ctx context.Context, db *dbtest.DB, fn func(appendFunc) error) error {
		return inAppendTxIn(ctx, db, table, fn)
	}
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		args := func(now int64, limit int, token uuid.UUID) outbox.ClaimArgs {
			return outbox.ClaimArgs{Now: now, Until: now + 60_000, Lease: 60_000, Limit: limit, MaxAttempts: 3, Token: token}
		}

		t.Run("append exists only if its transaction commits", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			rolledBack := errors.New("roll back")
			var lost uuid.UUID
			err := inAppendTx(ctxT(t), db, func(app appendFunc) error {
				var err error
				lost, err = app(thing{N: 1})
				require.NoError(t, err)
				return rolledBack
			})
			require.ErrorIs(t, err, rolledBack)
			require.Zero(t, count(t, db, "id = $1", lost))

			kept := appendEvents(t, db, thing{N: 2})[0]
			got := getRow(t, db, kept)
			require.JSONEq(t, `{"n":2}`, got.Payload)
			require.Equal(t, "Thing", got.Tag)
			require.Equal(t, got.CreatedAt, got.AvailableAt)
			require.Zero(t, got.Attempts)
			require.Nil(t, got.ClaimedUntil)
		})

		t.Run("a claim takes the oldest available rows up to its limit, each with the token, the lease and one more attempt", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			rs, err := storeOf(t, db).OpenRelay(10)
			require.NoError(t, err)
			t.Cleanup(func() { rs.Close(context.Background()) })
			ids := appendEvents(t, db, things(3)...)
			now := time.Now().UnixMilli() + 1000
			for i, id := range ids {
				exec(t, db, `UPDATE outbox_events SET created_at = $2 WHERE id = $1`, id, now-int64(10-i))
			}
			token := uuid.New()
			got := claimAll(t, rs, args(now, 2, token))
			require.Len(t, got, 2)
			require.ElementsMatch(t, ids[:2], []uuid.UUID{got[0].ID, got[1].ID}, "oldest first")
			for _, c := range got {
				require.Equal(t, 1, c.Attempts)
				require.False(t, c.Dead)
				require.JSONEq(t, `{"n":`+map[uuid.UUID]string{ids[0]: "0", ids[1]: "1"}[c.ID]+`}`, string(c.Payload))
				row := getRow(t, db, c.ID)
				require.Equal(t, now+60_000, *row.ClaimedUntil)
			}
			require.Equal(t, 2, count(t, db, "claim_token = $1 AND claim_lease = 60000", token))

			again := claimAll(t, rs, args(now, 10, uuid.New()))
			require.Len(t, again, 1, "leased rows are not claimed again")
			require.Equal(t, ids[2], again[0].ID)

			expired := claimAll(t, rs, args(now+60_001, 10, uuid.New()))
			require.Len(t, expired, 3, "a claim whose lease ran out is reclaimable")
		})

		t.Run("a row whose attempts are used up is dead-lettered by the claim, keeping its attempts", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			rs, err := storeOf(t, db).OpenRelay(10)
			require.NoError(t, err)
			t.Cleanup(func() { rs.Close(context.Background()) })
			id := appendEvents(t, db, thing{N: 1})[0]
			exec(t, db, `UPDATE outbox_events SET attempts = 3, last_error = 'boom' WHERE id = $1`, id)
			got := claimAll(t, rs, args(time.Now().UnixMilli(), 10, uuid.New()))
			require.Len(t, got, 1)
			require.True(t, got[0].Dead)
			row := getRow(t, db, id)
			require.Equal(t, 3, row.Attempts)
			require.NotNil(t, row.FailedAt)
			require.Nil(t, row.ClaimedUntil)
			require.Contains(t, *row.LastError, "attempt 3 of 3 was never settled")
			require.Contains(t, *row.LastError, "last error: boom")
			require.Zero(t, count(t, db, "claim_token IS NOT NULL"))
		})

		t.Run("a settle is fenced by the claim token and clears it", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			rs, err := storeOf(t, db).OpenRelay(10)
			require.NoError(t, err)
			t.Cleanup(func() { rs.Close(context.Background()) })
			ids := appendEvents(t, db, things(4)...)
			token := uuid.New()
			now := time.Now().UnixMilli()
			require.Len(t, claimAll(t, rs, args(now, 10, token)), 4)
			msg := "failed"
			settled, err := rs.Settle(ctxT(t), []outbox.Settlement{
				{ID: ids[0], Token: token, Kind: outbox.KindProcessed, At: now + 1},
				{ID: ids[1], Token: token, Kind: outbox.KindRetry, At: now + 5000, Err: &msg},
				{ID: ids[2], Token: token, Kind: outbox.KindFailed, At: now + 2, Err: &msg},
				{ID: ids[3], Token: uuid.New(), Kind: outbox.KindProcessed, At: now + 1}, // another claim's
			})
			require.NoError(t, err)
			require.Equal(t, map[uuid.UUID]struct{}{ids[0]: {}, ids[1]: {}, ids[2]: {}}, settled)
			require.Equal(t, now+1, *getRow(t, db, ids[0]).ProcessedAt)
			retried := getRow(t, db, ids[1])
			require.Equal(t, now+5000, retried.AvailableAt)
			require.Equal(t, "failed", *retried.LastError)
			require.Nil(t, retried.ClaimedUntil)
			require.Equal(t, now+2, *getRow(t, db, ids[2]).FailedAt)
			fenced := getRow(t, db, ids[3])
			require.Nil(t, fenced.ProcessedAt, "a settle with another token changes nothing")
			require.NotNil(t, fenced.ClaimedUntil)

			replay, err := rs.Settle(ctxT(t), []outbox.Settlement{{ID: ids[0], Token: token, Kind: outbox.KindRelease}})
			require.NoError(t, err)
			require.Empty(t, replay, "a replayed settle matches nothing: its token was cleared")
		})

		t.Run("a wait sets available_at and last_error and gives back the claim's attempt, fenced by the token", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			rs, err := storeOf(t, db).OpenRelay(10)
			require.NoError(t, err)
			t.Cleanup(func() { rs.Close(context.Background()) })
			ids := appendEvents(t, db, things(2)...)
			exec(t, db, `UPDATE outbox_events SET attempts = 2 WHERE id = $1`, ids[0])
			token := uuid.New()
			now := time.Now().UnixMilli()
			got := claimAll(t, rs, args(now, 10, token))
			require.Len(t, got, 2)
			msg := "duplicate window"
			settled, err := rs.Settle(ctxT(t), []outbox.Settlement{
				{ID: ids[0], Token: token, Kind: outbox.KindWait, At: now + 30_000, Err: &msg},
				{ID: ids[1], Token: uuid.New(), Kind: outbox.KindWait, At: now + 30_000, Err: &msg}, // another claim's
			})
			require.NoError(t, err)
			require.Equal(t, map[uuid.UUID]struct{}{ids[0]: {}}, settled)
			waited := getRow(t, db, ids[0])
			require.Equal(t, 2, waited.Attempts, "the attempt the claim took is given back")
			require.Equal(t, now+30_000, waited.AvailableAt)
			require.Equal(t, "duplicate window", *waited.LastError)
			require.Nil(t, waited.ClaimedUntil)
			require.Nil(t, waited.FailedAt)
			fenced := getRow(t, db, ids[1])
			require.Equal(t, 1, fenced.Attempts, "a wait with another token changes nothing")
			require.NotNil(t, fenced.ClaimedUntil)
			require.Nil(t, fenced.LastError)

			replay, err := rs.Settle(ctxT(t), []outbox.Settlement{{ID: ids[0], Token: token, Kind: outbox.KindWait, At: now, Err: &msg}})
			require.NoError(t, err)
			require.Empty(t, replay, "a replayed wait gives nothing back twice")
			require.Equal(t, 2, getRow(t, db, ids[0]).Attempts)
		})

		t.Run("backlog, requeue, delete and retention", func(t *testing.T) {
			t.Parallel()
			db := newDBOn(t, d)
			store := storeOf(t, db)
			ids := appendEvents(t, db, things(3)...)
			exec(t, db, `UPDATE outbox_events SET created_at = 100, failed_at = 1000, attempts = 3 WHERE id = $1`, ids[0])
			exec(t, db, `UPDATE outbox_events SET created_at = 50, processed_at = 2000 WHERE id = $1`, ids[1])
			exec(t, db, `UPDATE outbox_events SET created_at = 200 WHERE id = $1`, ids[2])
			oldest, failed, err := store.Backlog(ctxT(t))
			require.NoError(t, err)
			require.Equal(t, int64(200), *oldest, "the oldest pending row, not a processed or failed one")
			require.EqualValues(t, 1, failed)

			_, err = store.Delete(ctxT(t), []uuid.UUID{ids[0], ids[2]})
			require.ErrorIs(t, err, outbox.ErrPending)
			require.ErrorContains(t, err, ids[2].String())
			require.Len(t, allRows(t, db), 3, "nothing deleted when one is pending")

			n, err := store.Requeue(ctxT(t), []uuid.UUID{ids[0], ids[1], ids[2]}, false, 5000)
			require.NoError(t, err)
			require.EqualValues(t, 1, n, "only the failed row")
			row := getRow(t, db, ids[0])
			require.Nil(t, row.FailedAt)
			require.Zero(t, row.Attempts)
			require.Equal(t, int64(5000), row.AvailableAt)

			n, err = store.DeleteProcessed(ctxT(t), 2001, 10)
			require.NoError(t, err)
			require.EqualValues(t, 1, n)
			n, err = store.Delete(ctxT(t), []uuid.UUID{ids[1]})
			require.NoError(t, err)
			require.Zero(t, n, "already gone")
		})
	})
}

// TestSQLiteReplicasShareOneFile: relays of several processes on one SQLite
// file (each with its own connections, as a replica has) claim every row once:
// SQLite's one writer serialises their claims, and each sees the others'.
func TestSQLiteReplicasShareOneFile(t *testing.T) {
	t.Parallel()
	first := newDBOn(t, sqldb.SQLite)
	const rows, replicas = 300, 4
	appendEvents(t, first, things(rows)...)

	var mu sync.Mutex
	seen := map[uuid.UUID]int{}
	for range replicas {
		db := dbtest.OpenSQLite(t, first.URL) // a process of its own on the same file
		cfg := testConfig()
		cfg.ClaimSize = 7
		r := newRelay(t, db, cfg, handle(func(_ context.Context, m outbox.Message) error {
			mu.Lock()
			seen[m.ID]++
			mu.Unlock()
			return nil
		}))
		require.NoError(t, r.Start(ctxT(t)))
	}
	require.Eventually(t, func() bool { return count(t, first, "processed_at IS NOT NULL") == rows },
		30*time.Second, 20*time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, seen, rows)
	for id, n := range seen {
		require.Equal(t, 1, n, "row %s delivered %d times", id, n)
	}
	require.Equal(t, rows, count(t, first, "attempts = 1"), "no row was claimed twice")
}

// TestSQLiteColumnTypes: on SQLite an appended row stores its uuid as
// lowercase canonical TEXT, its JSON as TEXT and its times as INTEGER
// (contract section 9), and a claim's token is lowercase TEXT too.
func TestSQLiteColumnTypes(t *testing.T) {
	t.Parallel()
	db := newDBOn(t, sqldb.SQLite)
	id := appendEvents(t, db, thing{N: 1})[0]
	rs, err := storeOf(t, db).OpenRelay(1)
	require.NoError(t, err)
	claimAll(t, rs, outbox.ClaimArgs{Now: time.Now().UnixMilli() + 1, Until: time.Now().UnixMilli() + 60_000, Lease: 60_000, Limit: 1, MaxAttempts: 3, Token: uuid.New()})
	var idType, payloadType, createdType, tokenType, stored, token string
	require.NoError(t, db.QueryRow(`SELECT typeof(id), typeof(payload), typeof(created_at), typeof(claim_token), id, claim_token
		FROM outbox_events`).Scan(&idType, &payloadType, &createdType, &tokenType, &stored, &token))
	require.Equal(t, []string{"text", "text", "integer", "text"}, []string{idType, payloadType, createdType, tokenType})
	require.Equal(t, id.String(), stored, "lowercase canonical form")
	_, err = uuid.Parse(token)
	require.NoError(t, err)
	require.Equal(t, strings.ToLower(token), token)
}

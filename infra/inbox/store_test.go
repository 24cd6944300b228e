package inbox_test

import (
	"context"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/inboxtest"
	"github.com/acme/outboxpair/migrations"
)

// TestStoreConformance is the table of the inbox store contract that every
// dialect's store passes, statement by statement, on a consumer's tables of
// the test's own: the statements of a transaction through the dialect's own
// transactions, the others on their own. (The apply itself, receipts and
// effect, is the ledger's tests'.)
func TestStoreConformance(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := dbtest.New(t, d, migrations.Billing)
		inboxtest.Tables(t, db, "conf_receipts", "conf_nats_failed")
		database.Pick(db.DB, database.Dialects[bool]{
			Postgres: func(pg *postgres.DB) bool {
				return storeConformance(t, db, pg, inbox.NewPostgresStore(pg.Pool, "conf_receipts", "conf_nats_failed"))
			},
			SQLite: func(lite *sqlite.DB) bool {
				return storeConformance(t, db, lite, inbox.NewSQLiteStore(lite, "conf_receipts", "conf_nats_failed"))
			},
		})
	})
}

// storeConformance runs the cases on store over db (raw inspects the rows).
func storeConformance[TX any](t *testing.T, raw *dbtest.DB, db sqldb.Transactor[TX], store inbox.DialectStore[TX]) bool {
	ctx := context.Background()
	in := func(t *testing.T, fn func(tx TX) error) {
		t.Helper()
		require.NoError(t, db.InTx(ctx, sqldb.TxOptions{}, fn))
	}

	t.Run("receipts retention deletes at most its limit of receipts older than its bound", func(t *testing.T) {
		for i := range 3 {
			raw.Exec(t, `INSERT INTO conf_receipts (event_id, created_at) VALUES ($1, $2)`, uuid.New().String(), 10+i)
		}
		raw.Exec(t, `INSERT INTO conf_receipts (event_id, created_at) VALUES ($1, 1000)`, uuid.New().String())
		n, err := store.DeleteReceipts(ctx, 13, 2)
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		n, err = store.DeleteReceipts(ctx, 13, 2)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		require.Equal(t, 1, raw.Count(t, `SELECT count(*) FROM conf_receipts`))
	})

	t.Run("the NATS-failed table records a message once and lists, sizes, pages, edits and deletes its records", func(t *testing.T) {
		sig := "sig"
		rec := func(seq uint64, storedAt int64) inbox.NATSFailed {
			return inbox.NATSFailed{StreamSeq: seq, StoredAt: storedAt, Subject: "labeling.events.RuleActivated", MsgID: "m\xff",
				Payload: []byte("{}"), Signature: &sig, Reason: "r", Deliveries: 3, FailedAt: 5}
		}
		in(t, func(tx TX) error {
			for _, f := range []inbox.NATSFailed{rec(7, 1), rec(7, 1), rec(7, 2), rec(8, 1)} {
				require.NoError(t, store.InsertNATSFailed(ctx, tx, f))
			}
			return nil
		})
		all, err := store.ListNATSFailed(ctx)
		require.NoError(t, err)
		require.Len(t, all, 3, "a redelivery of a recorded message adds nothing; the same sequence stored at another time does")
		for i, f := range all {
			want := rec([]uint64{7, 7, 8}[i], []int64{1, 2, 1}[i])
			want.ID = f.ID
			require.Equal(t, want, f)
		}
		rows, bytes, err := store.NATSFailedSize(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 3, rows)
		require.EqualValues(t, 6, bytes)
		page, err := store.OldestNATSFailed(ctx, all[0].ID, 1)
		require.NoError(t, err)
		require.Len(t, page, 1)
		require.Equal(t, all[1], page[0])
		byID, err := store.NATSFailedByID(ctx, []int64{all[2].ID, all[0].ID, all[2].ID + 100})
		require.NoError(t, err)
		require.Equal(t, []inbox.NATSFailed{all[0], all[2]}, byID, "the records that exist, oldest first")
		listed, err := store.PageNATSFailed(ctx, all[0].ID, 5)
		require.NoError(t, err)
		require.Len(t, listed, 2, "the records after the cursor, at most limit")
		for i, f := range listed {
			want := all[i+1]
			want.Payload, want.Signature = nil, nil
			require.Equal(t, want, f, "a page carries no payload and no signature")
		}

		in(t, func(tx TX) error { return store.MarkNATSFailedVerified(ctx, tx, []int64{all[1].ID}) })
		unverified, err := store.OldestUnverifiedNATSFailed(ctx, 0, 5)
		require.NoError(t, err)
		require.Equal(t, []int64{all[0].ID, all[2].ID}, ids(unverified))
		unverified, err = store.OldestUnverifiedNATSFailed(ctx, all[0].ID, 5)
		require.NoError(t, err)
		require.Equal(t, []int64{all[2].ID}, ids(unverified))

		in(t, func(tx TX) error {
			require.NoError(t, store.SetNATSFailedReason(ctx, tx, all[1].ID, "replay refused"))
			n, err := store.DeleteNATSFailed(ctx, tx, all[0].ID, all[2].ID)
			require.NoError(t, err)
			require.EqualValues(t, 2, n)
			n, err = store.DeleteNATSFailed(ctx, tx, all[0].ID)
			require.NoError(t, err, "one already gone is no error")
			require.Zero(t, n)
			return store.SetNATSFailedReason(ctx, tx, all[0].ID, "gone")
		})
		left, err := store.ListNATSFailed(ctx)
		require.NoError(t, err)
		require.Len(t, left, 1)
		require.Equal(t, all[1].ID, left[0].ID)
		require.Equal(t, "replay refused", left[0].Reason)
		require.True(t, left[0].Verified)
		rows, bytes, err = store.NATSFailedSize(ctx)
		require.NoError(t, err)
		require.EqualValues(t, 1, rows, "the tally follows the deletes")
		require.EqualValues(t, 2, bytes)
	})
	return true
}

// TestConsumerChecked: a Consumer that cannot work is refused at New, naming
// what is wrong, before any statement runs.
func TestConsumerChecked(t *testing.T) {
	t.Parallel()
	db := dbtest.New(t, sqldb.SQLite, migrations.Billing)
	for name, edit := range map[string]func(*inbox.Consumer[entry]){
		"a table name that is no identifier": func(c *inbox.Consumer[entry]) { c.Receipts = "x; DROP TABLE y" },
		"no handlers":                        func(c *inbox.Consumer[entry]) { c.Handlers = nil },
		"no effect":                          func(c *inbox.Consumer[entry]) { c.Effect = inbox.Effect[entry]{} },
		"an effect missing for a dialect": func(c *inbox.Consumer[entry]) {
			c.Effect = inbox.Effect[entry]{SQLite: func(context.Context, sqlite.Tx, []inbox.Event[entry], int64) error { return nil }}
		},
		"an effect statement reading every event": func(c *inbox.Consumer[entry]) {
			c.Effect.Postgres = inbox.PostgresEffect[entry]{Args: func([]inbox.Event[entry]) []any { return nil },
				Statements: []string{`INSERT INTO t SELECT * FROM inbox_events`}}
		},
		"a fast path without its Args": func(c *inbox.Consumer[entry]) {
			c.Effect.Postgres = inbox.PostgresEffect[entry]{Statements: []string{`SELECT 1`}}
		},
		"two handlers of one type":      func(c *inbox.Consumer[entry]) { c.Handlers = append(c.Handlers, c.Handlers[0]) },
		"a handler not built by Handle": func(c *inbox.Consumer[entry]) { c.Handlers = []inbox.Handler[entry]{{}} },
	} {
		c := ledgerConsumer("ledger_checked")
		edit(&c)
		require.Panics(t, func() { inbox.New(db.DB, nil, c) }, name)
	}
}

// ids are the records' ids, in order.
func ids(records []inbox.NATSFailed) []int64 {
	out := make([]int64, len(records))
	for i, f := range records {
		out[i] = f.ID
	}
	return out
}

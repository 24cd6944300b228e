package billing_test

import (
	"context"
	"errors"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

// TestStoreConformance is the table of the billing store contract that every
// dialect's store passes, statement by statement: the statements of a
// transaction through the dialect's own transactions, the others on their own.
func TestStoreConformance(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := dbtest.New(t, d, migrations.Billing)
		database.Pick(db.DB, database.Dialects[bool]{
			Postgres: func(pg *postgres.DB) bool { return storeConformance(t, db, pg, billing.NewPostgresStore(pg.Pool)) },
			SQLite:   func(lite *sqlite.DB) bool { return storeConformance(t, db, lite, billing.NewSQLiteStore(lite)) },
		})
	})
}

// storeConformance runs the cases on store over db (raw inspects the rows).
// The cases run one after another on one database: each has events and orgs
// of its own, and the billing_nats_failed case is the only one to touch that
// table.
func storeConformance[TX any](t *testing.T, raw *dbtest.DB, db sqldb.Transactor[TX], store billing.DialectStore[TX]) bool {
	ctx := context.Background()
	in := func(t *testing.T, fn func(tx TX) error) {
		t.Helper()
		require.NoError(t, db.InTx(ctx, sqldb.TxOptions{}, fn))
	}
	ev := func(org uuid.UUID, delta int64) billing.Event {
		return billing.Event{ID: uuid.Must(uuid.NewV7()), Type: billing.RuleActivated, OccurredAt: 1, OrgID: org, Delta: delta}
	}
	active := func(t *testing.T, org uuid.UUID) int64 {
		t.Helper()
		var n int64
		require.NoError(t, db.InTx(ctx, sqldb.TxOptions{ReadOnly: true}, func(tx TX) error {
			var err error
			n, err = store.ActiveRules(ctx, tx, org)
			return err
		}))
		return n
	}

	t.Run("apply in a transaction applies each event once and sums its org's deltas", func(t *testing.T) {
		a, b := uuid.New(), uuid.New()
		events := []billing.Event{ev(a, 1), ev(a, 1), ev(b, 1), ev(a, -1)}
		in(t, func(tx TX) error {
			fresh, err := store.Apply(ctx, tx, events, 1000)
			require.NoError(t, err)
			require.Len(t, fresh, len(events))
			again, err := store.Apply(ctx, tx, events[:2], 2000)
			require.NoError(t, err)
			require.Empty(t, again, "a receipt that exists applies nothing")
			return nil
		})
		require.EqualValues(t, 1, active(t, a))
		require.EqualValues(t, 1, active(t, b))
		require.Zero(t, active(t, uuid.New()), "an org no event touched")
	})

	t.Run("a rolled-back apply leaves neither its receipts nor its change", func(t *testing.T) {
		org := uuid.New()
		e := ev(org, 1)
		rolledBack := errors.New("roll back")
		err := db.InTx(ctx, sqldb.TxOptions{}, func(tx TX) error {
			_, err := store.Apply(ctx, tx, []billing.Event{e}, 1000)
			require.NoError(t, err)
			return rolledBack
		})
		require.ErrorIs(t, err, rolledBack)
		require.Zero(t, active(t, org))
		require.Zero(t, raw.Count(t, `SELECT count(*) FROM billing_receipts WHERE event_id = $1`, e.ID.String()))
	})

	t.Run("apply on its own commits by itself and meets the receipts of apply in a transaction", func(t *testing.T) {
		org := uuid.New()
		first, second := ev(org, 1), ev(org, 1)
		in(t, func(tx TX) error {
			_, err := store.Apply(ctx, tx, []billing.Event{first}, 1000)
			return err
		})
		fresh, err := store.ApplyOwn(ctx, []billing.Event{first, second}, 1000)
		require.NoError(t, err)
		require.Equal(t, map[uuid.UUID]bool{second.ID: true}, fresh)
		require.EqualValues(t, 2, active(t, org))
	})

	t.Run("receipts retention deletes at most its limit of receipts older than its bound", func(t *testing.T) {
		before := raw.Count(t, `SELECT count(*) FROM billing_receipts`)
		org := uuid.New()
		_, err := store.ApplyOwn(ctx, []billing.Event{ev(org, 1), ev(org, 1), ev(org, 1)}, 10) // older than every other case's
		require.NoError(t, err)
		n, err := store.DeleteReceipts(ctx, 11, 2)
		require.NoError(t, err)
		require.EqualValues(t, 2, n)
		n, err = store.DeleteReceipts(ctx, 11, 2)
		require.NoError(t, err)
		require.EqualValues(t, 1, n)
		require.Equal(t, before, raw.Count(t, `SELECT count(*) FROM billing_receipts`))
	})

	t.Run("billing_nats_failed records a message once and lists, sizes, pages, edits and deletes its records", func(t *testing.T) {
		sig := "sig"
		rec := func(seq uint64, storedAt int64) billing.NATSFailed {
			return billing.NATSFailed{StreamSeq: seq, StoredAt: storedAt, Subject: "labeling.events.RuleActivated", MsgID: "m\xff",
				Payload: []byte("{}"), Signature: &sig, Reason: "r", Deliveries: 3, FailedAt: 5}
		}
		in(t, func(tx TX) error {
			for _, f := range []billing.NATSFailed{rec(7, 1), rec(7, 1), rec(7, 2), rec(8, 1)} {
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
		require.Equal(t, all[1].ID, page[0].ID)

		in(t, func(tx TX) error {
			require.NoError(t, store.SetNATSFailedReason(ctx, tx, all[1].ID, "replay refused"))
			require.NoError(t, store.DeleteNATSFailed(ctx, tx, all[0].ID))
			require.NoError(t, store.DeleteNATSFailed(ctx, tx, all[0].ID), "one already gone is no error")
			return store.SetNATSFailedReason(ctx, tx, all[0].ID, "gone")
		})
		left, err := store.ListNATSFailed(ctx)
		require.NoError(t, err)
		require.Len(t, left, 2)
		require.Equal(t, all[1].ID, left[0].ID)
		require.Equal(t, "replay refused", left[0].Reason)
	})
	return true
}

package labeling

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/migrations"
)

// TestStoreConformance is the table of the Store contract that every
// dialect's rules store passes, statement by statement, through its own
// dialect's transactions.
func TestStoreConformance(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		db := dbtest.New(t, d, migrations.Labeling)
		database.Pick(db.DB, database.Dialects[bool]{
			// No outbox store: the table runs the rules' statements, and Append
			// is outbox.Append's (infra/outbox's table).
			Postgres: func(pg *postgres.DB) bool {
				return rulesConformance(t, pg, func(tx postgres.Tx) Store { return NewPostgresStore(tx, nil) })
			},
			SQLite: func(lite *sqlite.DB) bool {
				return rulesConformance(t, lite, func(tx sqlite.Tx) Store { return NewSQLiteStore(tx, nil) })
			},
		})
	})
}

// rulesConformance runs the cases on the stores store builds on db's
// transactions; each case has orgs of its own, so they share the database.
func rulesConformance[TX any](t *testing.T, db sqldb.Transactor[TX], store func(TX) Store) bool {
	ctx := context.Background()
	in := func(t *testing.T, fn func(tx TX) error) {
		t.Helper()
		require.NoError(t, db.InTx(ctx, sqldb.TxOptions{}, fn))
	}
	newRule := func(org OrgID, at int64) Rule {
		return Rule{OrgID: org, ID: RuleID{uuid.New()}, Name: "n", Pattern: "p", Label: "l", CreatedAt: at, UpdatedAt: at}
	}
	org := func() OrgID { return OrgID{uuid.New()} }

	t.Run("insert stores a rule once; a second insert of its id stores nothing", func(t *testing.T) {
		a := org()
		r := newRule(a, 1000)
		in(t, func(tx TX) error {
			stored, created, err := store(tx).Insert(ctx, r)
			require.NoError(t, err)
			require.True(t, created)
			require.Equal(t, r, stored)
			other := r
			other.OrgID, other.Name = org(), "other"
			_, created, err = store(tx).Insert(ctx, other)
			require.NoError(t, err)
			require.False(t, created)
			got, found, err := store(tx).ByID(ctx, r.ID)
			require.NoError(t, err)
			require.True(t, found)
			require.Equal(t, r, got, "the first insert's row, whatever the org ByID is asked from")
			_, found, err = store(tx).ByID(ctx, RuleID{uuid.New()})
			require.NoError(t, err)
			require.False(t, found)
			return nil
		})
	})

	t.Run("a rule exists only if its transaction commits", func(t *testing.T) {
		r := newRule(org(), 1000)
		rolledBack := errors.New("roll back")
		err := db.InTx(ctx, sqldb.TxOptions{}, func(tx TX) error {
			_, _, err := store(tx).Insert(ctx, r)
			require.NoError(t, err)
			return rolledBack
		})
		require.ErrorIs(t, err, rolledBack)
		in(t, func(tx TX) error {
			_, found, err := store(tx).ByID(ctx, r.ID)
			require.NoError(t, err)
			require.False(t, found)
			return nil
		})
	})

	t.Run("get finds an org's rule and answers NotFound for another org's or none", func(t *testing.T) {
		a, b := org(), org()
		r := newRule(a, 1000)
		in(t, func(tx TX) error {
			_, _, err := store(tx).Insert(ctx, r)
			return err
		})
		require.NoError(t, db.InTx(ctx, sqldb.TxOptions{ReadOnly: true}, func(tx TX) error {
			got, err := store(tx).Get(ctx, a, r.ID)
			require.NoError(t, err)
			require.Equal(t, r, got)
			for _, miss := range []struct {
				org OrgID
				id  RuleID
			}{{b, r.ID}, {a, RuleID{uuid.New()}}} {
				_, err = store(tx).Get(ctx, miss.org, miss.id)
				require.ErrorIs(t, err, ErrRuleNotFound)
				require.Equal(t, fault.NotFound, fault.CodeOf(err))
			}
			return nil
		}))
	})

	t.Run("list pages an org's rules in id order after a given id", func(t *testing.T) {
		a := org()
		var want []Rule
		in(t, func(tx TX) error {
			for range 5 {
				r := newRule(a, 1000)
				_, _, err := store(tx).Insert(ctx, r)
				require.NoError(t, err)
				want = append(want, r)
			}
			_, _, err := store(tx).Insert(ctx, newRule(org(), 1000)) // another org's
			return err
		})
		sortRules(want)
		require.NoError(t, db.InTx(ctx, sqldb.TxOptions{ReadOnly: true}, func(tx TX) error {
			all, err := store(tx).List(ctx, a, uuid.Nil, 10)
			require.NoError(t, err)
			require.Equal(t, want, all)
			page, err := store(tx).List(ctx, a, want[1].ID.UUID(), 2)
			require.NoError(t, err)
			require.Equal(t, want[2:4], page)
			none, err := store(tx).List(ctx, a, want[4].ID.UUID(), 2)
			require.NoError(t, err)
			require.Empty(t, none)
			return nil
		}))
	})

	t.Run("set active changes a rule once, never moving updated_at back", func(t *testing.T) {
		a := org()
		r := newRule(a, 5000)
		in(t, func(tx TX) error {
			_, _, err := store(tx).Insert(ctx, r)
			require.NoError(t, err)
			got, changed, err := store(tx).SetActive(ctx, a, r.ID, true, 1000) // a clock behind the row's
			require.NoError(t, err)
			require.True(t, changed)
			require.True(t, got.Active)
			require.EqualValues(t, 5000, got.UpdatedAt, "updated_at never goes back")
			_, changed, err = store(tx).SetActive(ctx, a, r.ID, true, 9000)
			require.NoError(t, err)
			require.False(t, changed, "already active: nothing changes")
			_, changed, err = store(tx).SetActive(ctx, org(), r.ID, false, 9000)
			require.NoError(t, err)
			require.False(t, changed, "another org's rule is not changed")
			got, changed, err = store(tx).SetActive(ctx, a, r.ID, false, 9000)
			require.NoError(t, err)
			require.True(t, changed)
			require.False(t, got.Active)
			require.EqualValues(t, 9000, got.UpdatedAt)
			return nil
		})
	})
	return true
}

func sortRules(rs []Rule) {
	slices.SortFunc(rs, func(a, b Rule) int { return strings.Compare(a.ID.String(), b.ID.String()) })
}

// TestSQLiteStoreStatementsKeepTheTransactionDeadline: a statement a store runs
// in a SQLite transaction is bounded by DB_STATEMENT_TIMEOUT though its caller
// passes a context without any deadline: the transaction's executor applies
// it. Past the bound the statement fails as unavailable (503), not with
// database/sql's "transaction has already been committed or rolled back"
// (a 500), which is what a statement run on the caller's context alone gets.
func TestSQLiteStoreStatementsKeepTheTransactionDeadline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, "sqlite:"+filepath.Join(t.TempDir(), "t.db"), sqldb.Bounds{StatementTimeout: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	require.NoError(t, sqlite.Migrate(ctx, db, migrations.Labeling.SQLite, migrations.Labeling.Table, nil))
	err = db.InTx(ctx, sqldb.TxOptions{ReadOnly: true}, func(tx sqlite.Tx) error {
		time.Sleep(200 * time.Millisecond) // past the bound: database/sql has rolled the transaction back
		_, err := NewSQLiteStore(tx, nil).Get(context.Background(), OrgID{uuid.New()}, RuleID{uuid.New()})
		return err
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.True(t, db.Unavailable(err), "%v", err)
}

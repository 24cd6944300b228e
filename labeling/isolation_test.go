package labeling

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

// A server whose default isolation is REPEATABLE READ must not turn a create that
// meets a concurrent insert of the same id into a 500: the pool pins READ COMMITTED.
func TestCreateUnderRepeatableReadDefault(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.New(t, migrations.Labeling)
	_, err := db.Pool.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{db.Name}.Sanitize()+
		` SET default_transaction_isolation = 'repeatable read'`)
	require.NoError(t, err)
	pool, err := postgres.Open(ctx, db.URL) // new connections: they see the new default
	require.NoError(t, err)
	defer pool.Close()
	svc := NewService(postgres.NewDB(pool), &countingNudger{})

	org, _ := ParseOrgID(uuid.NewString())
	n, err := NewRuleFrom(uuid.NewString(), "n", "p", "l")
	require.NoError(t, err)
	// Another request's create of the same rule, not yet committed.
	other, err := db.Pool.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = other.Rollback(ctx) }()
	_, err = other.Exec(ctx, `INSERT INTO labeling_rules (org_id, id, name, pattern, label, active, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, false, 1, 1)`, org.UUID(), n.ID.UUID(), n.Name, n.Pattern, n.Label)
	require.NoError(t, err)

	type result struct {
		created bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		_, created, err := svc.Create(ctx, org, n)
		done <- result{created, err}
	}()
	require.Eventually(t, func() bool {
		var waiting int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting)
		return err == nil && waiting == 1
	}, 30*time.Second, 10*time.Millisecond, "the create waits for the other insert")
	require.NoError(t, other.Commit(ctx))

	r := <-done
	require.NoError(t, r.err, "a replay of a concurrent create, not a serialization failure")
	require.False(t, r.created)
}

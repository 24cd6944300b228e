package outbox

import (
	"context"
	"maps"

	"github.com/jackc/pgx/v5/pgxpool"
)

// relayMaxConns is the size of the relay's own pool: its claim loop and its
// settler hold one connection each at most, and one more lets RunOnce or a
// claim still being cut off at Stop run beside them.
const relayMaxConns = 3

// ConnParams are the session settings of the relay's own connections, on top
// of those of the pool it is given. Only the relay's claims, settles and
// releases (the sweep is a claim) run on them; an append runs in the caller's
// transaction, and the admin commands on their own pool.
//
//   - synchronous_commit = off: a claim or settle does not wait for its WAL
//     flush. What a database crash can lose is its last few hundred
//     milliseconds of claims and settles, never an append (the API's commits
//     stay synchronous): a lost claim leaves its rows claimable, a lost
//     settle leaves its row claimed until the lease ends, a lost release the
//     same; each only makes the row be delivered again, and every consumer
//     deduplicates by the row id (billing's receipts). No fact is lost and
//     none is applied twice. Stop's last settles and releases commit
//     synchronously all the same (see durable), so an exit 0 is not undone.
//   - plan_cache_mode = force_generic_plan: the claim and the settle are
//     planned once per connection (their generic plans stay on the pending
//     index and the primary key whatever the statistics, see claimSQL and
//     TestPlansStayOnIndexes), instead of PostgreSQL planning every claim
//     afresh because its generic plan's estimate looks costlier than a custom
//     one's.
//   - enable_seqscan = off: a generic plan is made once, with the statistics
//     of its first execution, and kept. A relay that starts on an empty outbox
//     (the usual start) would keep a settle that hash-joins over a sequential
//     scan, right for an empty table and 19 ms a settle at 100k rows, until
//     the next ANALYZE; with autovacuum slow or off, for ever. Every statement
//     of these connections finds its rows by an index, so a plan that scans the
//     table is always a mistake here (TestPlansPreparedOnAnEmptyOutbox).
func ConnParams() map[string]string {
	return map[string]string{
		"synchronous_commit": "off",
		"plan_cache_mode":    "force_generic_plan",
		"enable_seqscan":     "off",
	}
}

// ownPool opens the relay's own pool on pool's database, with pool's
// connection settings (bounds, isolation, tracer) and ConnParams, at most
// relayMaxConns connections. Its claims then never queue behind the API's
// requests for a connection of the shared pool, nor the API behind them. It
// connects only when first used.
func ownPool(pool *pgxpool.Pool) (*pgxpool.Pool, error) {
	cfg := pool.Config()
	cfg.MaxConns = relayMaxConns
	cfg.MinConns = 0
	params := maps.Clone(cfg.ConnConfig.RuntimeParams)
	if params == nil {
		params = map[string]string{}
	}
	maps.Copy(params, ConnParams())
	cfg.ConnConfig.RuntimeParams = params
	return pgxpool.NewWithConfig(context.Background(), cfg)
}

// closeWithin closes the relay's pool, waiting no longer than ctx: closing
// waits for each connection's goodbye, which an unreachable database never
// answers; the server ends a session whose client is gone.
func closeWithin(ctx context.Context, pool *pgxpool.Pool) {
	done := make(chan struct{})
	go func() {
		pool.Close()
		close(done)
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

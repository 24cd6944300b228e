package outbox

import "github.com/jackc/pgx/v5/pgxpool"

// The statements, for the EXPLAIN tests.
const SettleSQL = settleSQL

// ClaimSQL is the claim statement of a relay with that claim size.
func ClaimSQL(claimSize int) string { return claimSQL(claimSize) }

// LoopDone is closed when the relay's claim loop has returned.
func (r *Relay) LoopDone() <-chan struct{} { return r.done }

// Pool is the relay's own pool (PostgreSQL).
func (r *Relay) Pool() *pgxpool.Pool { return r.store.(*pgRelayStore).pool }

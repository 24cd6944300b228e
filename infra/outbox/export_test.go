package outbox

// The statements, for the EXPLAIN tests.
const (
	ClaimSQL  = claimSQL
	SettleSQL = settleSQL
)

// LoopDone is closed when the relay's claim loop has returned.
func (r *Relay) LoopDone() <-chan struct{} { return r.done }

package outbox

// The statements, for the EXPLAIN tests.
const (
	ClaimSQL  = claimSQL
	SettleSQL = settleSQL
)

package outbox

// ClaimSQL exposes the claim statement to the EXPLAIN test.
const ClaimSQL = claimSQL

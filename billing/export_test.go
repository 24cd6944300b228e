package billing

import (
	"context"

	"github.com/acme/outboxpair/infra/sqldb"
)

// Waiting reports how many calls of Apply wait for the next group transaction,
// so that a test can line deliveries up behind a transaction it holds.
func (s *Service) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Tx is the statements of one transaction of a Service, bound to it.
type Tx = billingTx

// InTx runs fn in a write transaction of the Service's database, with the
// statements of its dialect bound to it.
func (s *Service) InTx(ctx context.Context, fn func(Tx) error) error {
	return s.run(ctx, sqldb.TxOptions{}, fn)
}

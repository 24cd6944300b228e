package billing

// Waiting reports how many calls of Apply wait for the next group transaction,
// so that a test can line deliveries up behind a transaction it holds.
func (s *Service) Waiting() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

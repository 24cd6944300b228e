package inbox

import "github.com/acme/outboxpair/infra/stream"

// NATSHandlerCountingVerifies is NATSHandler with verified called before each
// signature the bound's prune verifies: how a test sees what the prune reads.
func (s *Inbox[V]) NATSHandlerCountingVerifies(cfg NATSConfig, verified func()) (stream.Handler, error) {
	return s.natsHandler(cfg, verified)
}

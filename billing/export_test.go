package billing

import (
	"context"

	"github.com/acme/outboxpair/infra/inbox"
)

// Tx is what a test writes beside the Service: a billing_nats_failed record.
type Tx interface {
	InsertNATSFailed(ctx context.Context, f inbox.NATSFailed) error
}

// recorder is Tx through the inbox's Record.
type recorder struct{ s *Service }

func (r recorder) InsertNATSFailed(ctx context.Context, f inbox.NATSFailed) error {
	return r.s.Record(ctx, f)
}

// InTx runs fn with the Service's writes.
func (s *Service) InTx(_ context.Context, fn func(Tx) error) error { return fn(recorder{s}) }

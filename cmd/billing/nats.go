package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/infra/config"
	"github.com/acme/outboxpair/infra/stream"
)

// natsConsumer is billing's durable consumer of LABELING_EVENTS when NATS_URL is
// set, nothing otherwise. Registered after billing.Module, it starts last and
// stops first, before the pool closes.
func natsConsumer(cfg config.Billing) fx.Option {
	if cfg.NATSURL == "" {
		return fx.Options()
	}
	return fx.Invoke(func(lc fx.Lifecycle, svc *billing.Service, logger *slog.Logger) error {
		c, err := stream.NewConsumer(stream.ConsumerConfig{
			URL: cfg.NATSURL, Durable: billing.Durable, AckWait: cfg.NATSAckWait,
		}, svc.HandleNATS, logger)
		if err != nil {
			return err
		}
		lc.Append(fx.Hook{OnStart: c.Start, OnStop: c.Stop})
		return nil
	})
}

// natsFailed prints billing_nats_failed, one message a line, tab-separated:
// stream_seq, subject, msg_id, deliveries, failed_at (RFC 3339), reason.
func natsFailed(cfg config.Command, stdout io.Writer) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("DATABASE_URL: %w", err)
	}
	defer pool.Close()
	rows, err := billing.ListNATSFailed(ctx, pool)
	if err != nil {
		return err
	}
	esc := strings.NewReplacer(`\`, `\\`, "\t", `\t`, "\n", `\n`)
	for _, f := range rows {
		fmt.Fprintf(stdout, "%d\t%s\t%s\t%d\t%s\t%s\n", f.StreamSeq, esc.Replace(f.Subject), esc.Replace(f.MsgID),
			f.Deliveries, time.UnixMilli(f.FailedAt).UTC().Format(time.RFC3339Nano), esc.Replace(f.Reason))
	}
	return nil
}

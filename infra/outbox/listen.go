package outbox

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// notifyChannel is the channel the trigger of migration 00003 notifies on every
// append, at the commit of the appending transaction.
const notifyChannel = "outbox_events"

const (
	listenRetry    = 100 * time.Millisecond
	listenRetryMax = 30 * time.Second
)

// listen holds a dedicated connection (outside the pool, from the pool's
// connection settings) that LISTENs for appends and nudges the relay on each,
// so a row appended by any replica is claimed at once. A lost connection is
// replaced with a doubling wait; meanwhile the relay still polls.
func (r *Relay) listen(ctx context.Context) {
	defer close(r.listenDone)
	failures := 0
	for {
		err := r.listenOnce(ctx, &failures)
		if ctx.Err() != nil {
			return
		}
		failures++
		wait := failBackoff(failures, listenRetry, listenRetryMax)
		if failures == 1 {
			r.logger.Warn("outbox relay cannot LISTEN; polling until it can", "err", err, "retry_in", wait)
		} else {
			r.logger.Debug("outbox relay cannot LISTEN", "err", err, "failures", failures, "retry_in", wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

func (r *Relay) listenOnce(ctx context.Context, failures *int) error {
	connectCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(connectCtx, r.pool.Config().ConnConfig.Copy())
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn.Close(closeCtx) //nolint:errcheck // the connection is dropped either way
	}()
	if _, err := conn.Exec(connectCtx, "LISTEN "+notifyChannel); err != nil {
		return err
	}
	if *failures > 0 {
		r.logger.Info("outbox relay listens again", "failed_attempts", *failures)
		*failures = 0
	}
	r.Nudge() // rows appended while nobody listened
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		r.Nudge()
	}
}

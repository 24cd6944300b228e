package outbox

import (
	"context"
	"strconv"
	"strings"
	"time"
)

// requeuedPrefix starts the payload of a requeue's notification; the lowest
// created_at of the requeued rows (epoch ms) follows. An append's broadcast has
// an empty payload.
const requeuedPrefix = "requeued:"

func requeuedPayload(lowest int64) string { return requeuedPrefix + strconv.FormatInt(lowest, 10) }

// requeuedFloor is the created_at a requeue's notification names, if it is one.
func requeuedFloor(payload string) (int64, bool) {
	rest, ok := strings.CutPrefix(payload, requeuedPrefix)
	if !ok {
		return 0, false
	}
	ms, err := strconv.ParseInt(rest, 10, 64)
	return ms, err == nil
}

const (
	listenRetry    = 100 * time.Millisecond
	listenRetryMax = 30 * time.Second
)

// listen holds a dedicated connection (outside the pool, from the pool's
// connection settings) that LISTENs on its table's channel (the table's name:
// outbox_events for labeling's) and wakes the relay on
// each notification from another session, so a row appended on any replica is
// claimed at once by whichever relay has a free slot. The same connection
// broadcasts this process's Nudges (pg_notify after the appending commit,
// folded while one is in flight). A lost connection is replaced with a
// doubling wait; meanwhile the relay still polls.
//
// Choice: the notification is sent after the commit, not by a trigger inside
// the appending transaction. A NOTIFY holds a database-wide lock until its
// transaction has committed, so in-transaction notifies serialise every
// appending commit (2,400 → 350 inserts/s with 8 clients on this machine). A
// notification lost between the commit and the broadcast (the process died)
// costs other replicas a poll interval; this process's own relay was woken by
// Nudge directly.
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
	return r.listener.Listen(ctx, ListenHooks{
		Connected: func() {
			if *failures > 0 {
				r.logger.Info("outbox relay listens again", "failed_attempts", *failures)
				*failures = 0
			}
			r.wake() // rows appended elsewhere while nobody listened
		},
		Notified: func(payload string, fromSelf bool) {
			if ms, ok := requeuedFloor(payload); ok {
				r.lowerFloor(ms)
			}
			if !fromSelf {
				r.wake()
			}
		},
		Broadcast: r.broadcast,
	})
}

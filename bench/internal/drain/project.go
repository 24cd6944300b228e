package drain

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/acme/outboxpair/bench/internal/db"
	"github.com/acme/outboxpair/bench/internal/report"
	"github.com/acme/outboxpair/bench/internal/sitting"
	"github.com/acme/outboxpair/billing"
)

// errLimit is a drain that did not finish within -drain-limit.
var errLimit = errors.New("drain limit reached")

// Rate is n rows over the time from start to end (Probe.Wait's outcome); a
// drain cut off by -drain-limit counts only the rows it drained, and says so in
// s's notes. what names the drain in its errors and notes.
func Rate(s *sitting.Sitting, what string, n int, start, end time.Time, left int64, err error) (float64, error) {
	if errors.Is(err, errLimit) {
		s.Res.Note("%s: only %d of %d rows drained within -drain-limit %s; its rate is rows drained / time", what, int64(n)-left, n, s.Opt.DrainLimit)
		report.Logf("%s: cut off by -drain-limit with %d rows left", what, left)
		err = nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	rate, err := rateOf(n, left, start, end)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return rate, nil
}

// rateOf is the rows drained (n less the rows left) per second from start (the
// backlog's commit) to end (the last effect). An end not after the start means
// the stamps are wrong (an effect stamped before its row existed), never a fast
// drain.
func rateOf(n int, left int64, start, end time.Time) (float64, error) {
	d := end.Sub(start)
	if d <= 0 {
		return 0, fmt.Errorf("the last effect (%s) is not after the backlog's commit (%s)", end.Format(time.RFC3339Nano), start.Format(time.RFC3339Nano))
	}
	return float64(int64(n)-left) / d.Seconds(), nil
}

// Project measures rows/s of one in-process relay draining a backlog of n
// rows, timed as the package comment says, on a fresh labeling database (the
// pool or files the services open). With bil set the relay applies each event
// with billing's Apply on bil, and the drain ends at its last receipt; else
// its subscribers do nothing.
func Project(ctx context.Context, s *sitting.Sitting, n int, analyzed bool, bil *db.Billing) (float64, error) {
	lab, err := db.NewLabeling(ctx, s, false)
	if err != nil {
		return 0, err
	}
	defer lab.Close()
	pr := ProbesOf(s)
	subs, endDB, endSQL := sitting.NoopSubs(), lab.Q, pr.NoopEnd
	if bil != nil {
		subs, endDB, endSQL = sitting.ApplySubs(billing.NewService(bil.Port, sitting.Quiet())), bil.Q, pr.ReceiptsEnd
	}
	relay, err := sitting.NewRelay(lab.Store, s.Relay, subs)
	if err != nil {
		return 0, err
	}
	if err := relay.Start(ctx); err != nil {
		return 0, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = sitting.StopRelay(relay.Relay) // an error path: the database is dropped anyway
		}
	}()
	// On PostgreSQL the backlog's transaction carries the relays' wake-up; on
	// SQLite the appending process nudges its relay after the commit, as a use
	// case does (a Nudge there only wakes the relay: nothing is broadcast).
	commit := func(n int, analyzed bool) (time.Time, error) {
		start, err := lab.Commit(ctx, n, analyzed)
		if err == nil && s.Opt.SQLite {
			relay.Nudge()
		}
		return start, err
	}
	if _, err := WarmUp(ctx, func() (time.Time, error) { return commit(1, false) },
		NoRow(ctx, lab.Q, pr.Pending), StampOf(ctx, endDB, endSQL)); err != nil {
		return 0, err
	}
	start, err := commit(n, analyzed)
	if err != nil {
		return 0, err
	}
	probe := Probe{Q: lab.Q, Probe: pr.Pending, From: pr.PendingFrom, CountLeft: pr.PendingCount, EndDB: endDB, EndSQL: endSQL}
	end, left, err := probe.Wait(ctx, n, s.Opt.DrainLimit)
	rate, err := Rate(s, fmt.Sprintf("project drain of %d", n), n, start, end, left, err)
	if err != nil {
		return 0, err
	}
	stopped = true
	if err := sitting.StopRelay(relay.Relay); err != nil {
		return 0, err
	}
	return rate, nil
}

// ProjectConsumer is the relay applying a backlog of n events to billing in
// process, on a fresh billing database: events/s.
func ProjectConsumer(ctx context.Context, s *sitting.Sitting, n int) (float64, error) {
	bil, err := db.NewBilling(ctx, s, false)
	if err != nil {
		return 0, err
	}
	defer bil.Close()
	return Project(ctx, s, n, false, bil)
}

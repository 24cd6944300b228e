package outbox

import (
	"log/slog"
	"sync"
	"time"
)

const (
	// attemptLogWindow and attemptLogBurst bound the log of failed attempts:
	// at most attemptLogBurst lines a window, then one line with the count of
	// the rest. An outage fails every row's attempt; a line per row would
	// drown the log (and the disk) in copies of one cause.
	attemptLogWindow = time.Second
	attemptLogBurst  = 5
)

// attemptLog logs failed delivery attempts at WARN, rate-limited: the first
// attemptLogBurst of each window one by one, the rest counted and summed up in
// one line ("suppressed") when their window ends. Every failed attempt is in
// the log, one by one or in a count.
type attemptLog struct {
	logger *slog.Logger

	mu         sync.Mutex
	start      time.Time // of the current window
	logged     int       // lines written in the current window
	suppressed int       // attempts not written since the last summary
	summary    *time.Timer
}

// failed logs one failed attempt of o, to be tried again at next.
func (l *attemptLog) failed(o outcome, next time.Time) {
	l.mu.Lock()
	now := time.Now()
	if now.Sub(l.start) >= attemptLogWindow {
		l.start, l.logged = now, 0
	}
	if l.logged < attemptLogBurst {
		l.logged++
		l.mu.Unlock()
		l.logger.Warn("outbox delivery attempt failed; the row is retried later",
			"id", o.ID, "tag", o.Tag, "attempt", o.Attempt, "err", o.cause, "next_try", next.UTC())
		return
	}
	l.suppressed++
	if l.suppressed == 1 {
		l.summary = time.AfterFunc(l.start.Add(attemptLogWindow).Sub(now), l.flush)
	}
	l.mu.Unlock()
}

// flush writes the count of the attempts not logged one by one, if any.
func (l *attemptLog) flush() {
	l.mu.Lock()
	n := l.suppressed
	l.suppressed = 0
	if l.summary != nil {
		l.summary.Stop()
		l.summary = nil
	}
	l.mu.Unlock()
	if n > 0 {
		l.logger.Warn("outbox delivery attempts failed; not logged one by one",
			"suppressed", n, "most_per_second", attemptLogBurst)
	}
}

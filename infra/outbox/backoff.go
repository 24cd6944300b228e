package outbox

import (
	"math/rand/v2"
	"strings"
	"time"
	"unicode/utf8"
)

const (
	// maxBackoff caps the wait after failed ticks (also never more than
	// failBackoffFactor × PollInterval, and never less than PollInterval).
	maxBackoff        = 30 * time.Second
	failBackoffFactor = 30
	// maxErrorLen bounds last_error; a handler may return a whole response body.
	maxErrorLen = 2048
)

// RetryDelayRange bounds the wait before attempt n+1 after attempt n failed:
// with d = base × 2^(n-1), "equal jitter" between d/2 and d, both ends capped at
// maxDelay. The ranges of successive attempts do not overlap, so the delay never
// shrinks from one attempt to the next. The README's dead-letter window is the
// sum of these ranges (deploy's TestREADMEDeadLetterWindow holds it to them).
func RetryDelayRange(attempt int, base, maxDelay time.Duration) (lo, hi time.Duration) {
	d := base
	for i := 1; i < attempt && d < 2*maxDelay; i++ {
		d *= 2
	}
	return min(d/2, maxDelay), min(d, maxDelay)
}

// durableDelay is the wait before attempt n+1 after attempt n failed: drawn
// uniformly from RetryDelayRange, so relays that failed together spread out.
func durableDelay(attempt int, base, maxDelay time.Duration) time.Duration {
	lo, hi := RetryDelayRange(attempt, base, maxDelay)
	return lo + time.Duration(rand.Int64N(int64(hi-lo)+1))
}

// failBackoff is the wait after the n-th failed step in a row, starting from
// first and doubling up to limit.
func failBackoff(n int, first, limit time.Duration) time.Duration {
	d := first
	for i := 1; i < n && d < limit; i++ {
		d *= 2
	}
	return min(d, limit)
}

// tickBackoff is the wait after the n-th failed claim in a row.
func (r *Relay) tickBackoff(n int) time.Duration {
	limit := max(r.cfg.PollInterval, min(maxBackoff, failBackoffFactor*r.cfg.PollInterval))
	return failBackoff(n, r.cfg.PollInterval, limit)
}

// errorText is err as stored in last_error: bounded, valid UTF-8, and free of NUL
// bytes (which a text column refuses, and the settle would fail with it).
func errorText(err error) string {
	s := strings.ReplaceAll(err.Error(), "\x00", "")
	if len(s) > maxErrorLen {
		cut := maxErrorLen
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut-- // never split a rune
		}
		s = s[:cut] + "…"
	}
	return strings.ToValidUTF8(s, "\uFFFD")
}

package sqldb

import (
	"fmt"
	"time"
)

// Bounds are the limits of a service's statements, in either dialect (0: the
// dialect's default, which is what a migration runs with). On PostgreSQL they
// are statement_timeout and lock_timeout of every pooled connection (a bounded
// pool also ends a transaction left idle: infra/postgres); on SQLite the
// statement timeout bounds each transaction (interrupting its statement) and
// the lock timeout is the busy timeout. A statement or a lock wait over its
// bound fails as unavailable, so the caller answers 503 instead of waiting for
// ever. It is the one type of these limits: infra/database, infra/postgres and
// infra/sqlite all take it.
type Bounds struct {
	StatementTimeout time.Duration // DB_STATEMENT_TIMEOUT
	LockTimeout      time.Duration // DB_LOCK_TIMEOUT
}

// The bounds' defaults (DB_STATEMENT_TIMEOUT, DB_LOCK_TIMEOUT) and their
// maximum, far above any sensible setting (a typo, an extra digit).
const (
	DefaultStatementTimeout = 5 * time.Second
	DefaultLockTimeout      = 2 * time.Second
	MaxTimeout              = time.Hour
)

// DefaultBounds are the bounds of a service's pool when none is set.
func DefaultBounds() Bounds {
	return Bounds{StatementTimeout: DefaultStatementTimeout, LockTimeout: DefaultLockTimeout}
}

// Validate reports the first bound out of its range (negative, or over
// MaxTimeout) as "Field: what is wrong".
func (b Bounds) Validate() error {
	for _, d := range []struct {
		field string
		v     time.Duration
	}{{"StatementTimeout", b.StatementTimeout}, {"LockTimeout", b.LockTimeout}} {
		switch {
		case d.v < 0:
			return fmt.Errorf("%s: %s must not be negative", d.field, d.v)
		case d.v > MaxTimeout:
			return fmt.Errorf("%s: %s is more than the maximum of %s", d.field, d.v, MaxTimeout)
		}
	}
	return nil
}

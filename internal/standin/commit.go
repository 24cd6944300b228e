package standin

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
)

// maxGroup bounds the calls one group commit applies: far above the calls a
// relay has in flight (OUTBOX_WORKERS, 40 by default), so it only keeps one
// transaction well inside the statement timeout under a flood.
const maxGroup = 256

// errStopped answers a call that arrives after Close began.
var errStopped = errors.New("the stand-in is stopping")

// receipt is one verified call waiting for its commit: its key and its
// effect, and where its outcome goes.
type receipt struct {
	key        string
	org        string
	count      int64
	occurredAt int64
	eventID    string
	version    int64
	appliedAt  int64
	// done receives the outcome exactly once, after the group's transaction
	// committed (err nil) or failed (err set): buffered, so the committer
	// never waits for a handler.
	done chan outcome
}

// outcome is what a receipt's commit did: duplicate when its key was applied
// before (by an earlier call, or by another call of the same group).
type outcome struct {
	duplicate bool
	err       error
}

// committer is the stand-in's one writer: group commit. Every handler hands
// its verified call over an unbuffered channel and waits for the outcome; the
// committer takes the first call, then every call whose handler is already
// waiting to hand one over (at most maxGroup), applies them in one
// transaction, one after the other in arrival order, and answers each of them
// only after that transaction's COMMIT has returned, which under
// synchronous=FULL has fsync'ed the WAL (infra/sqlite). So the calls that
// arrive while one fsync runs share the next one, and none is answered before
// its key and effect are durable. There is no timer: a lone call commits at
// once; groups form only from the calls that would otherwise queue for the
// one writer connection.
type committer struct {
	db    *sqlite.DB
	calls chan *receipt
	stop  chan struct{} // closed by Close: no more calls are taken
	done  chan struct{} // closed when run has returned
	once  sync.Once
}

func newCommitter(db *sqlite.DB) *committer {
	c := &committer{db: db, calls: make(chan *receipt), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// apply hands r to the committer and waits for its outcome. The channel is
// unbuffered, so a call either is taken by the committer, which then always
// answers it, or is refused (ctx ended, or Close began) having done nothing.
// Once taken, apply waits for the commit whatever ctx does: the commit is
// bounded by the statement timeout, and an answer given before it would
// name a call that a crash could still lose.
func (c *committer) apply(ctx context.Context, r *receipt) (duplicate bool, err error) {
	r.done = make(chan outcome, 1)
	select {
	case c.calls <- r:
	case <-c.stop:
		return false, errStopped
	case <-ctx.Done():
		return false, ctx.Err()
	}
	o := <-r.done
	return o.duplicate, o.err
}

// close stops taking calls and waits for the group being committed, if any.
// A second close waits the same.
func (c *committer) close() {
	c.once.Do(func() { close(c.stop) })
	<-c.done
}

func (c *committer) run() {
	defer close(c.done)
	group := make([]*receipt, 0, maxGroup)
	for {
		select {
		case r := <-c.calls:
			group = append(group[:0], r)
		case <-c.stop:
			return
		}
	gather:
		for len(group) < maxGroup {
			select {
			case r := <-c.calls: // a handler already waiting: it joins this group
				group = append(group, r)
			default:
				break gather
			}
		}
		c.commit(group)
	}
}

// commit applies group in one transaction and answers each call. When the
// transaction fails and holds more than one call, each call is applied again
// alone, so that a call that cannot be applied never costs the others their
// answer; a failed transaction committed nothing, so nothing is applied twice.
// A database that is unavailable (busy past the busy timeout, an I/O error, a
// full disk) fails the whole group at once instead: each call alone would only
// wait as long again, one after the other.
func (c *committer) commit(group []*receipt) {
	dups := make([]bool, len(group))
	// Not a handler's context: one caller gone must not roll back the others.
	err := c.db.InTx(context.Background(), sqldb.TxOptions{}, func(tx sqlite.Tx) error {
		return applyGroup(tx, group, dups)
	})
	if err != nil && len(group) > 1 && !sqlite.Unavailable(err) {
		for _, r := range group {
			c.commit([]*receipt{r})
		}
		return
	}
	for i, r := range group {
		r.done <- outcome{duplicate: dups[i], err: err}
	}
}

// The statements of one call. The key and its effect are in the same
// transaction, so a crash between the apply and the answer leaves the key, and
// the sender's retry finds it and changes nothing.
const (
	insertKey = `
		INSERT INTO provider_applied (idempotency_key, org_id, active_rules, occurred_at, event_id, applied_at, version)
		VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (idempotency_key) DO NOTHING`
	countDuplicate = `UPDATE provider_counters SET n = n + 1 WHERE name = 'duplicates'`
	// Calls arrive in no order: an org keeps the count of its highest
	// version, whatever came last. occurredAt cannot order them: billing reads
	// it before it takes the quota row's lock, so two replicas may commit two
	// changes in the other order. An unversioned call (version 0, appended
	// before billing's migration 00006) is kept only while the org has no
	// versioned count, ordered among its kind as before: by occurredAt, then
	// the UUIDv7 id.
	upsertOrg = `
		INSERT INTO provider_orgs (org_id, active_rules, occurred_at, event_id, version) VALUES (?1, ?2, ?3, ?4, ?5)
		ON CONFLICT (org_id) DO UPDATE SET active_rules = excluded.active_rules,
			occurred_at = excluded.occurred_at, event_id = excluded.event_id, version = excluded.version
		WHERE (excluded.version, excluded.occurred_at, excluded.event_id)
			> (provider_orgs.version, provider_orgs.occurred_at, provider_orgs.event_id)`
)

// applyGroup runs each call's statements in tx, in order, recording in dups
// which keys were there already: a key twice in one group is applied by its
// first call and a duplicate for the second, as if they had come one after
// the other.
func applyGroup(tx sqlite.Tx, group []*receipt, dups []bool) error {
	ctx := context.Background() // tx bounds every statement by the statement timeout
	stmts := make([]sqlite.Stmt, 0, 3)
	defer func() {
		for _, s := range stmts {
			_ = s.Close()
		}
	}()
	prepare := func(q string) (sqlite.Stmt, error) {
		s, err := tx.Prepare(ctx, q)
		if err == nil {
			stmts = append(stmts, s)
		}
		return s, err
	}
	key, err := prepare(insertKey)
	if err != nil {
		return err
	}
	dup, err := prepare(countDuplicate)
	if err != nil {
		return err
	}
	org, err := prepare(upsertOrg)
	if err != nil {
		return err
	}
	for i, r := range group {
		res, err := key.Exec(ctx, r.key, r.org, r.count, r.occurredAt, r.eventID, r.appliedAt, r.version)
		if err != nil {
			return fmt.Errorf("key %s: %w", r.key, err)
		}
		added, err := res.RowsAffected()
		if err != nil {
			return fmt.Errorf("key %s: %w", r.key, err)
		}
		if added == 0 {
			dups[i] = true
			if _, err := dup.Exec(ctx); err != nil {
				return fmt.Errorf("key %s: %w", r.key, err)
			}
			continue
		}
		if _, err := org.Exec(ctx, r.org, r.count, r.occurredAt, r.eventID, r.version); err != nil {
			return fmt.Errorf("key %s: %w", r.key, err)
		}
	}
	return nil
}

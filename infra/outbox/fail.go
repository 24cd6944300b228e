package outbox

// Fail: the operator's "fail now" of pending rows (`outbox fail ID...`, the
// console's button), on both dialects. Its statements live here, beside the
// exported function, rather than in store_postgres.go and store_sqlite.go:
// they run on the operator's path only and build their text per call.

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/acme/outboxpair/infra/sqlite"
)

// FailedByOperator starts the last_error of a row that Fail dead-lettered,
// followed by the row's attempts and its previous last_error, so the failed
// list tells it from a row the relay gave up on (and a requeue of it is not
// futile: nothing refused it).
const FailedByOperator = "failed now by an operator"

// Fail dead-letters the pending rows among ids at once: failed_at now,
// last_error FailedByOperator with the attempts so far and the previous
// error, and the claim cleared (claimed_until, claim_token, claim_lease). It
// returns how many rows it changed. Ids of rows that are failed, processed or
// absent are left alone, as Requeue leaves alone those that are not failed.
//
// It fences the relays: a relay that holds one of the rows now (claimed,
// its delivery under way) settles it by id and claim token, and the token is
// gone, so its outcome changes nothing and the row stays failed (the settle
// is counted as fenced). What that relay already sent may still arrive: a
// delivery cannot be called back, and the consumer dedups by id if the row is
// requeued later. A row failed this way is requeued (Requeue) or deleted
// (Delete) like any other failed row.
func Fail(ctx context.Context, store Store, ids []uuid.UUID) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	n, err := store.Fail(ctx, ids, time.Now().UnixMilli())
	if err != nil {
		return 0, fmt.Errorf("outbox: fail: %w", err)
	}
	return n, nil
}

// failSet is the SET of the fail statement on both dialects: $1 / ?1 is now.
const failSet = `
			SET failed_at = %[1]s, claimed_until = NULL, claim_token = NULL, claim_lease = NULL,
			    last_error = '` + FailedByOperator + ` after ' || attempts || ' attempt(s); last error: ' || coalesce(last_error, 'none')`

// pgFailSQL fails the pending rows of $2 (an array of ids) at $1.
var pgFailSQL = `
			UPDATE outbox_events` + fmt.Sprintf(failSet, "$1") + `
			WHERE id = ANY($2) AND processed_at IS NULL AND failed_at IS NULL`

// Fail runs pgFailSQL: one statement, each row locked as it is changed, so a
// claim running beside it either took the row first (and its token is
// cleared here) or finds it failed.
func (s *pgStore) Fail(ctx context.Context, ids []uuid.UUID, now int64) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, onTable(pgFailSQL, s.sql.table), now, ids)
		n = tag.RowsAffected()
		return err
	})
	return n, err
}

// sqliteFailSQL fails the pending rows of ?2 (a JSON array of ids) at ?1.
var sqliteFailSQL = `
			UPDATE outbox_events` + fmt.Sprintf(failSet, "?1") + `
			WHERE id IN (SELECT value FROM json_each(?2)) AND processed_at IS NULL AND failed_at IS NULL`

// Fail runs sqliteFailSQL in one write transaction.
func (s *sqliteStore) Fail(ctx context.Context, ids []uuid.UUID, now int64) (int64, error) {
	var n int64
	err := s.write(ctx, func(tx sqlite.Tx) error {
		res, err := tx.Exec(ctx, onTable(sqliteFailSQL, s.sql.table), now, idList(ids))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

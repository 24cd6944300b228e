package db

import (
	"context"
	"crypto/md5"
	"database/sql"
	"fmt"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Orgs is how many organisations the generated events spread over: enough that
// the quota upsert is not one hot row, few enough that rows are shared.
const Orgs = 100

// RulesPerClient is how many rules each producer (Go or pgbench client) toggles.
const RulesPerClient = 1000

// OrgID and RuleID are the ids the SQL side derives with md5('org' || i)::uuid
// and md5('rule' || i)::uuid, so Go and pgbench touch the same rows.
func OrgID(i int) uuid.UUID { return md5UUID("org" + strconv.Itoa(i)) }

// RuleID is rule i's id, as md5('rule' || i)::uuid derives it (see OrgID).
func RuleID(i int) uuid.UUID { return md5UUID("rule" + strconv.Itoa(i)) }

func md5UUID(s string) uuid.UUID { return uuid.UUID(md5.Sum([]byte(s))) }

// SeedRules inserts clients × RulesPerClient inactive rules, rule r in org r % Orgs.
func SeedRules(ctx context.Context, pool *pgxpool.Pool, clients int) error {
	_, err := pool.Exec(ctx, `
		INSERT INTO labeling_rules (org_id, id, name, pattern, label, active, created_at, updated_at)
		SELECT md5('org' || (r % $2))::uuid, md5('rule' || r)::uuid, 'bench ' || r, '(?i)invoice', 'finance', false, $3, $3
		FROM generate_series(0, $1::int - 1) AS r`, clients*RulesPerClient, Orgs, time.Now().UnixMilli())
	return err
}

// liteSeedRules inserts n inactive rules, rule r in org r % Orgs, as SeedRules.
func liteSeedRules(ctx context.Context, w *sql.DB, n int) error {
	_, err := LiteCommit(ctx, w, "", func(tx *sql.Tx) error {
		now := time.Now().UnixMilli()
		for r := range n {
			if _, err := tx.ExecContext(ctx, `
				INSERT INTO labeling_rules (org_id, id, name, pattern, label, active, created_at, updated_at)
				VALUES (?1, ?2, ?3, '(?i)invoice', 'finance', 0, ?4, ?4)`,
				OrgID(r%Orgs).String(), RuleID(r).String(), fmt.Sprintf("bench %d", r), now); err != nil {
				return err
			}
		}
		return nil
	})
	return err
}

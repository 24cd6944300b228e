package db

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

// StampSQL installs the latency stamp on table (one of stampKeys), recording
// the event's id and the clock when its row is written: on PostgreSQL a
// deferred constraint trigger, which fires at the writing transaction's commit
// and takes clock_timestamp(); on SQLite, which has no deferred trigger, a
// trigger at the INSERT, which takes unixepoch('subsec'). Either writes into
// bench_stamp, a side table of the same database. The triggers exist only in
// the benchmark's own databases.
func StampSQL(lite bool, table string) string {
	if lite {
		return `
CREATE TABLE bench_stamp (id TEXT PRIMARY KEY, at INTEGER NOT NULL);
CREATE TRIGGER bench_stamp AFTER INSERT ON ` + table + ` BEGIN
	INSERT OR IGNORE INTO bench_stamp (id, at) VALUES (` + stampKeys[table][1] + `, CAST(round(unixepoch('subsec') * 1000) AS INTEGER));
END;`
	}
	return `
CREATE TABLE bench_stamp (id uuid PRIMARY KEY, at timestamptz NOT NULL);
CREATE FUNCTION bench_stamp() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	INSERT INTO bench_stamp (id, at) VALUES (` + stampKeys[table][0] + `, clock_timestamp()) ON CONFLICT DO NOTHING;
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER bench_stamp AFTER INSERT ON ` + table + `
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION bench_stamp();`
}

// StampIf is StampSQL when stamp is set, else nothing ("").
func StampIf(stamp, lite bool, table string) string {
	if !stamp {
		return ""
	}
	return StampSQL(lite, table)
}

// stampKeys is the event id of each stamped table's new row, on PostgreSQL
// and on SQLite (River's args are JSONB there).
var stampKeys = map[string][2]string{
	"outbox_events":    {"NEW.id", "NEW.id"},
	"river_job":        {"(NEW.args->>'id')::uuid", "json_extract(NEW.args, '$.id')"},
	"billing_receipts": {"NEW.event_id", "NEW.event_id"},
}

func installStamp(ctx context.Context, dbURL, sql string) error {
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = pool.Exec(ctx, sql)
	return err
}

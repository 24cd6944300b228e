package drain

// The SQLite sitting (-sqlite) runs the pair on SQLite files beside River on
// SQLite (riversqlite), in one run of interleaved rounds, timed as on
// PostgreSQL with what SQLite allows:
//
//   - Every file is opened as the services open theirs (infra/sqlite): WAL,
//     synchronous=FULL, the busy timeout, BEGIN IMMEDIATE on one writer
//     connection. River gets the very DSN of that writer on the one connection
//     its driver's documentation asks for (more connections fail with
//     SQLITE_BUSY): the same durability, the same lock behaviour.
//   - SQLite has no server clock and no deferred trigger. A drain's clock starts
//     at this process's clock read last before the backlog's commit, and every
//     stamp is this host's clock too (the relay's processed_at, River's
//     finalized_at, a trigger's unixepoch('subsec')), in milliseconds: SQLite's
//     'now' has no finer grain. A trigger fires at its INSERT, inside the
//     committing transaction, so a stamp is early by the rest of that
//     transaction and its fsync, at both ends of a latency and for every system
//     alike.
//   - SQLite has no LISTEN/NOTIFY: a relay is woken by a Nudge in the appending
//     process (contract section 9), River by its driver's notification table,
//     which its listener polls every 50ms. So the in-process pair is nudged after
//     the backlog's commit (as a use case nudges after its own), and the pair
//     over HTTP gets one activation POSTed right after it: an append in
//     labeling's own process is the only wake-up the binaries have; that event
//     is one of the drain's n.
//   - The probes read through read-only connections of their own, so they take
//     nothing from River's one connection or the pair's pools.

// liteProbes are the probes and end stamps in SQLite's form (pgProbes).
var liteProbes = Probes{
	Pending:           `SELECT 1 FROM outbox_events WHERE processed_at IS NULL AND failed_at IS NULL ORDER BY created_at LIMIT 1`,
	PendingCount:      pendingCountSQL,
	NoopEnd:           `SELECT max(processed_at) FROM outbox_events`,
	RiverPending:      `SELECT 1 FROM river_job WHERE state IN ('available', 'running', 'retryable', 'scheduled', 'pending') LIMIT 1`,
	RiverPendingCount: riverPendingCountSQL,
	// River stores a time as 'YYYY-MM-DD HH:MM:SS.mmm' UTC, which sorts as it
	// compares.
	RiverEnd:      `SELECT CAST(round(unixepoch(max(finalized_at), 'subsec') * 1000) AS INTEGER) FROM river_job`,
	ReceiptsEnd:   `SELECT max(at) FROM bench_stamp`,
	ReceiptsCount: receiptsCountSQL,
}

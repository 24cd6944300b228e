// Package ledger is the example consumer of docs/adopting.md: a team's own
// service built on infra/inbox, beside billing. It keeps a ledger of rule
// activations: one row of ledger_entries per RuleActivated event, applied
// exactly once whatever the deliveries (HTTP or NATS, redeliveries, crashes).
//
// What a team writes is all here: the value an event carries (Entry), its
// handler (the payload it reads), its effect (one Go function, both
// dialects), its migrations (embedded, with their own goose table) and its
// reads. The receipts, group apply, retries, the HTTP intake, the NATS
// handler and its dead letters are infra/inbox's. cmd/ledger wires it into a
// binary as cmd/billing wires billing.
package ledger

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/migrations"
)

// The ledger's names: its inbox's (metrics ledger_events_total, …, spans,
// HTTP realm), its tables and its NATS durable.
const (
	Name       = "ledger"
	Receipts   = "ledger_receipts"
	NATSFailed = "ledger_nats_failed"
	Durable    = "ledger"
)

// EventType is the one type the ledger handles; the producer routes only it
// here (HTTP: SUBSCRIBER_<N>_TYPES; NATS: the durable's filter).
const EventType = "RuleActivated"

// The ledger's crash points (infra/failpoint), armed by FAILPOINTS in a
// binary built with -tags failpoints: the inbox passes them.
const (
	FailpointBeforeCommit    = "ledger.events.before-commit" // entries and receipts written, not committed
	FailpointAfterCommit     = "ledger.events.after-commit"  // HTTP: committed, before the 2xx
	FailpointNATSAfterCommit = "ledger.nats.after-commit"    // NATS: committed, before the ack
)

//go:embed migrations/postgres/*.sql migrations/sqlite/*.sql
var files embed.FS

// Migrations are the ledger's tables in both dialects, recorded in goose
// table ledger_goose_db_version, so they share a database with labeling's or
// billing's sets without mixing versions.
var Migrations = migrations.Set{
	FS:     sub("migrations/postgres"),
	SQLite: sub("migrations/sqlite"),
	Table:  "ledger_goose_db_version",
	Marker: "ledger_entries",
}

func sub(dir string) fs.FS {
	f, err := fs.Sub(files, dir)
	if err != nil {
		panic(err)
	}
	return f
}

// Entry is what a RuleActivated event does to the ledger: one row.
type Entry struct {
	OrgID  uuid.UUID
	RuleID uuid.UUID
}

// activated is the part of RuleActivated's payload the ledger reads; a
// pointer tells a missing field from a zero one.
type activated struct {
	OrgID  *uuid.UUID `json:"orgId"`
	RuleID *uuid.UUID `json:"ruleId"`
}

// Consumer is the ledger on infra/inbox: its tables, its one handler, its
// effect and its crash points.
func Consumer() inbox.Consumer[Entry] {
	return inbox.Consumer[Entry]{
		Name:       Name,
		Receipts:   Receipts,
		NATSFailed: NATSFailed,
		Handlers: []inbox.Handler[Entry]{inbox.Handle(EventType, func(p activated) (Entry, error) {
			if p.OrgID == nil || p.RuleID == nil || *p.OrgID == uuid.Nil || *p.RuleID == uuid.Nil {
				return Entry{}, errors.New("orgId and ruleId are required")
			}
			return Entry{OrgID: *p.OrgID, RuleID: *p.RuleID}, nil
		})},
		Effect: inbox.Effect[Entry]{Func: apply},
		Failpoints: inbox.Failpoints{
			BeforeCommit:    FailpointBeforeCommit,
			AfterCommit:     FailpointAfterCommit,
			NATSAfterCommit: FailpointNATSAfterCommit,
		},
	}
}

// apply is the ledger's effect: an entry per new event, in the receipts'
// transaction (the inbox gives only the events whose receipt is new, so a
// redelivery writes nothing).
func apply(ctx context.Context, tx inbox.Tx, fresh []inbox.Event[Entry], now time.Time) error {
	for _, e := range fresh {
		_, err := tx.Exec(ctx, `INSERT INTO ledger_entries (event_id, org_id, rule_id, occurred_at, created_at)
			VALUES ($1, $2, $3, $4, $5)`, e.ID, e.Value.OrgID, e.Value.RuleID, e.OccurredAt, now.UnixMilli())
		if err != nil {
			return fmt.Errorf("insert ledger entry: %w", err)
		}
	}
	return nil
}

// Row is an entry as the ledger lists it.
type Row struct {
	EventID    uuid.UUID `json:"eventId"`
	OrgID      uuid.UUID `json:"orgId"`
	RuleID     uuid.UUID `json:"ruleId"`
	OccurredAt int64     `json:"occurredAt"` // epoch ms, the producer's
	CreatedAt  int64     `json:"createdAt"`  // epoch ms, when applied here
}

// Count is how many entries the ledger holds.
func Count(ctx context.Context, db sqldb.DB) (n int64, err error) {
	err = inbox.Read(ctx, db, func(tx inbox.Tx) error {
		return tx.QueryRow(ctx, `SELECT count(*) FROM ledger_entries`).Scan(&n)
	})
	if err != nil {
		return 0, fmt.Errorf("count ledger entries: %w", err)
	}
	return n, nil
}

// List returns the limit entries applied last, newest first.
func List(ctx context.Context, db sqldb.DB, limit int) ([]Row, error) {
	out := []Row{}
	err := inbox.Read(ctx, db, func(tx inbox.Tx) error {
		rows, err := tx.Query(ctx, `SELECT event_id, org_id, rule_id, occurred_at, created_at
			FROM ledger_entries ORDER BY created_at DESC, event_id DESC LIMIT $1`, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var r Row
			if err := rows.Scan(&r.EventID, &r.OrgID, &r.RuleID, &r.OccurredAt, &r.CreatedAt); err != nil {
				return err
			}
			out = append(out, r)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, fmt.Errorf("list ledger entries: %w", err)
	}
	return out, nil
}

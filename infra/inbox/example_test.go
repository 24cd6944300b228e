package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/example/ledger"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/inbox"
	"github.com/acme/outboxpair/infra/sqldb"
)

// Activation is what a consumer makes of a RuleActivated event.
type Activation struct{ OrgID, RuleID uuid.UUID }

// activatedPayload is the part of RuleActivated's payload the consumer reads
// (names match exactly; other fields are ignored).
type activatedPayload struct {
	OrgID  *uuid.UUID `json:"orgId"`
	RuleID *uuid.UUID `json:"ruleId"`
}

// A consumer is its tables (from its migrations), a handler per event type
// and its effect: one Go function, run in the transaction that inserts the
// receipts, with the events whose receipt is new. The same code runs on
// PostgreSQL and SQLite (here SQLite, in a temporary file).
func ExampleNew() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "inbox-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := database.Open(ctx, "sqlite:"+filepath.Join(dir, "consumer.db"), sqldb.Bounds{})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	// The consumer's migrations create its tables, receipts included
	// (example/ledger's here: ledger_entries, ledger_receipts, ledger_nats_failed).
	if err := database.Migrate(ctx, db, ledger.Migrations, nil); err != nil {
		panic(err)
	}

	ib := inbox.New(db, slog.New(slog.DiscardHandler), inbox.Consumer[Activation]{
		Name:       "example",
		Receipts:   "ledger_receipts",
		NATSFailed: "ledger_nats_failed",
		Handlers: []inbox.Handler[Activation]{
			inbox.Handle("RuleActivated", func(p activatedPayload) (Activation, error) {
				if p.OrgID == nil || p.RuleID == nil {
					return Activation{}, errors.New("orgId and ruleId are required")
				}
				return Activation{OrgID: *p.OrgID, RuleID: *p.RuleID}, nil
			}),
		},
		Effect: inbox.Effect[Activation]{
			Func: func(ctx context.Context, tx inbox.Tx, fresh []inbox.Event[Activation], now time.Time) error {
				for _, e := range fresh {
					if _, err := tx.Exec(ctx, `INSERT INTO ledger_entries (event_id, org_id, rule_id, occurred_at, created_at)
						VALUES ($1, $2, $3, $4, $5)`, e.ID, e.Value.OrgID, e.Value.RuleID, e.OccurredAt, now.UnixMilli()); err != nil {
						return err
					}
				}
				return nil
			},
		},
	})

	// A delivery as the intake (or the NATS handler) decodes it, then applies it.
	payload := json.RawMessage(fmt.Sprintf(`{"orgId":%q,"ruleId":%q}`, uuid.New(), uuid.New()))
	e, err := ib.Decode(uuid.Must(uuid.NewV7()), "RuleActivated", time.Now().UnixMilli(), payload)
	if err != nil {
		panic(err)
	}
	for _, delivery := range []string{"first delivery", "redelivery"} {
		applied, err := ib.Apply(ctx, e)
		if err != nil {
			panic(err)
		}
		fmt.Println(delivery, "applied:", applied)
	}
	n, err := ledger.Count(ctx, db)
	if err != nil {
		panic(err)
	}
	fmt.Println("entries:", n)
	// Output:
	// first delivery applied: true
	// redelivery applied: false
	// entries: 1
}

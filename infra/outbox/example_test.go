package outbox_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/migrations"
)

// RuleArchived is a producer's event: its JSON is the row's payload.
type RuleArchived struct {
	RuleID uuid.UUID `json:"ruleId"`
}

// EventTag names its type.
func (RuleArchived) EventTag() string { return "RuleArchived" }

// A use case appends its event in its own transaction, beside its own write:
// the row exists if and only if the transaction commits. After the commit it
// nudges the relay (an outbox.Nudger, the relay itself), which delivers the
// row to the subscribers.
func ExampleAppend() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := database.Open(ctx, "sqlite:"+filepath.Join(dir, "labeling.db"), sqldb.Bounds{})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	// The producer's migrations create outbox_events (labeling's here).
	if err := database.Migrate(ctx, db, migrations.Labeling, nil); err != nil {
		panic(err)
	}
	lite := db.(*sqlite.DB)
	store := outbox.NewSQLiteStore(lite)

	var id uuid.UUID
	err = lite.InTx(ctx, sqldb.TxOptions{}, func(tx sqlite.Tx) error {
		// … the use case's own statements on tx …
		id, err = outbox.Append(ctx, store, tx, RuleArchived{RuleID: uuid.New()})
		return err
	})
	if err != nil {
		panic(err)
	}
	// relay.Nudge() here, after the commit.
	fmt.Println("appended row, a UUIDv7:", id.Version() == 7)
	// Output: appended row, a UUIDv7: true
}

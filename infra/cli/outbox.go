package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strconv"

	"github.com/google/uuid"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/wire"
)

// The dead-letter commands of an outbox (contract section 1: `labeling outbox
// …`, and `billing outbox …` on billing_outbox_events, section 10), written
// once for every binary with an outbox: the same words, output, exit codes
// and bounds whatever the table.

// OutboxStore makes a command's action from fn, run with the binary's outbox
// store: the binary opens its database (DATABASE_URL and the DB_* bounds
// only, as for every operator command) and bounds the run (Bounded), and
// builds the store on its table.
type OutboxStore func(fn func(ctx context.Context, store outbox.Store, stdout, stderr io.Writer) error) Action

// OutboxCommands are `outbox failed`, `outbox requeue ID...` / `outbox
// requeue --all-failed` and `outbox delete ID...` on the store withStore
// gives, for a binary's command table. defaultSubscriber is how `outbox
// failed` names the subscriber of a row for the table's default subscriber
// (outbox.DefaultSubscriber, the empty name): labeling's billing, billing's
// provider.
func OutboxCommands(withStore OutboxStore, defaultSubscriber string) []Command {
	return []Command{
		{
			Name:    "outbox failed",
			Summary: "print the dead-lettered rows, one a line, tab-separated: id, event_tag, attempts, failed_at, last_error, subscriber",
			Run: withStore(func(ctx context.Context, store outbox.Store, stdout, stderr io.Writer) error {
				return outboxFailed(ctx, store, defaultSubscriber, stdout, stderr)
			}),
		},
		{Name: "outbox requeue", Args: "ID...", Summary: "make these failed rows pending again, attempts reset to 0", Parse: parseRequeue(withStore)},
		{Name: "outbox delete", Args: "ID...", Summary: "delete these rows; refused if any is pending", Parse: NoFlags(onIDs(withStore, "delete", "deleted", outbox.Delete))},
	}
}

// outboxFailed is `outbox failed`: one dead-lettered row a line,
// tab-separated: id, event_tag, attempts, failed_at, last_error, subscriber
// (last, so a script reading the first five columns reads what it always
// did); none prints "no failed rows" on stderr. A requeue of a row
// re-delivers its event to that row's subscriber alone.
func outboxFailed(ctx context.Context, store outbox.Store, defaultSubscriber string, stdout, stderr io.Writer) error {
	rows, err := outbox.Failed(ctx, store)
	if err != nil {
		return err
	}
	list := NewListing(stdout, stderr, "no failed rows")
	defer list.Close()
	for _, r := range rows {
		sub := r.Subscriber
		if sub == outbox.DefaultSubscriber {
			sub = defaultSubscriber
		}
		list.Row(r.ID.String(), r.Tag, strconv.Itoa(r.Attempts), Time(r.FailedAt), r.LastError, sub)
	}
	return nil
}

// parseRequeue reads `outbox requeue ID...` or `... --all-failed`, which
// stands alone: a row id with it is a usage error, not a narrower requeue.
func parseRequeue(withStore OutboxStore) func(fs *flag.FlagSet) func(args []string) (Action, error) {
	return func(fs *flag.FlagSet) func(args []string) (Action, error) {
		all := fs.Bool("all-failed", false, "make every failed row pending again, attempts reset to 0 (no ID with it)")
		byID := onIDs(withStore, "requeue", "requeued", outbox.Requeue)
		return func(args []string) (Action, error) {
			if !*all {
				return byID(args)
			}
			if len(args) > 0 {
				return nil, fmt.Errorf("outbox requeue --all-failed takes no row ids, got %q", args)
			}
			return withStore(requeueAllFailed), nil
		}
	}
}

// requeueAllFailed makes every failed row pending again.
func requeueAllFailed(ctx context.Context, store outbox.Store, stdout, _ io.Writer) error {
	n, err := outbox.RequeueAllFailed(ctx, store)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "requeued %d rows\n", n)
	return nil
}

// onIDs is the parser of `outbox NAME ID...`: its action runs op on those rows
// and prints "DONE n of m rows", m the ids given, n the rows op changed (an id
// that names no row op may change is left alone, and the count says so).
func onIDs(withStore OutboxStore, name, done string, op func(context.Context, outbox.Store, []uuid.UUID) (int64, error)) func(args []string) (Action, error) {
	return func(args []string) (Action, error) {
		ids, err := parseIDs(name, args)
		if err != nil {
			return nil, err
		}
		return withStore(func(ctx context.Context, store outbox.Store, stdout, _ io.Writer) error {
			n, err := op(ctx, store, ids)
			if err != nil {
				return err
			}
			fmt.Fprintf(stdout, "%s %d of %d rows\n", done, n, len(ids))
			return nil
		}), nil
	}
}

// parseIDs reads the row ids of `outbox NAME ID...`: at least one, each a UUID in
// its 36-character form.
func parseIDs(name string, args []string) ([]uuid.UUID, error) {
	if len(args) == 0 {
		return nil, fmt.Errorf("outbox %s needs at least one row id", name)
	}
	ids := make([]uuid.UUID, 0, len(args))
	for _, s := range args {
		id, err := wire.ParseUUID(s)
		if err != nil {
			// Also catches a flag after an id, where flag parsing stopped.
			return nil, fmt.Errorf("outbox %s: %q is not a row id (a UUID)", name, s)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

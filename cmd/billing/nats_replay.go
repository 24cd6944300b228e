package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strconv"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/cmd/billing/config"
	"github.com/acme/outboxpair/infra/cli"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/inbox"
)

// parseReplay reads `billing nats replay ID...` or `... --all [--after ID]`,
// which stands alone: a record id with it is a usage error, not a narrower
// replay; --after goes with --all only.
func parseReplay(fs *flag.FlagSet) func(args []string) (cli.Action, error) {
	all := fs.Bool("all", false, "replay every record of billing_nats_failed (no ID with it)")
	after := fs.Int64("after", 0, "with --all, only the records with an id above this one: resume a replay that stopped after it")
	return func(args []string) (cli.Action, error) {
		if *after < 0 {
			return nil, fmt.Errorf("nats replay --after %d: not a record id (a non-negative integer, the id column)", *after)
		}
		if *all {
			if len(args) > 0 {
				return nil, fmt.Errorf("nats replay --all takes no record ids, got %q", args)
			}
			return natsReplay(nil, *after), nil
		}
		if *after != 0 {
			return nil, fmt.Errorf("nats replay --after goes with --all")
		}
		if len(args) == 0 {
			return nil, fmt.Errorf("nats replay needs at least one record id, or --all")
		}
		ids := make([]int64, 0, len(args))
		for _, a := range args {
			id, err := strconv.ParseInt(a, 10, 64)
			if err != nil || id < 1 {
				// Also catches a flag after an id, where flag parsing stopped.
				return nil, fmt.Errorf("nats replay: %q is not a record id (a positive integer, the id column)", a)
			}
			ids = append(ids, id)
		}
		return natsReplay(ids, 0), nil
	}
}

// natsReplay is `billing nats replay`: billing.Service.ReplayNATSFailed on ids
// (nil: every record with an id above after) under EVENTS_TOKEN and
// EVENTS_TOKEN_PREVIOUS, with RECEIPTS_RETENTION's late bound, bounded by
// commandTimeout and stopped by a signal. It works in id-ordered batches, each
// committed before the next. It prints `replayed N of M records` on stdout,
// then one line a reason class of the records that stayed, `K stayed: CLASS`;
// it exits 0 when every record was checked, whatever stayed (as `labeling
// outbox requeue` does with N below M), 1 when it could not finish (the
// summary says what it did; a replay of every record that stopped also says,
// on stderr, the last record done and the command that resumes after it).
func natsReplay(ids []int64, after int64) cli.Action {
	return func(lookup envvar.Lookup, stdout, stderr io.Writer) error {
		cfg, err := config.LoadReplay(lookup)
		if err != nil {
			return err
		}
		return cli.Bounded(commandTimeout, func(ctx context.Context) error {
			return replay(ctx, cfg, ids, after, stdout, stderr)
		})
	}
}

// replay runs `billing nats replay` on ids (nil: every record above after)
// and prints its report.
func replay(ctx context.Context, cfg config.Replay, ids []int64, after int64, stdout, stderr io.Writer) error {
	// An existing database only: replay on a wrong path would otherwise
	// create an empty one and report "replayed 0 of 0 records". Named on
	// stderr before the report (cli.OpenDatabase).
	db, err := cli.OpenDatabase(ctx, cfg.DatabaseURL, cfg.Bounds, stderr)
	if err != nil {
		return err
	}
	defer db.Close()
	svc := billing.NewService(db, slog.New(slog.NewJSONHandler(stderr, nil)).With("service", "billing"),
		billing.RefuseOlderThan(cfg.ReceiptsRetention))
	keys := [][]byte{[]byte(cfg.EventsToken)}
	if cfg.EventsTokenPrevious != "" {
		keys = append(keys, []byte(cfg.EventsTokenPrevious))
	}
	var rep inbox.ReplayReport
	if ids == nil {
		rep, err = svc.ReplayNATSFailedAfter(ctx, keys, after, 0)
	} else {
		rep, err = svc.ReplayNATSFailed(ctx, keys, ids)
	}
	fmt.Fprintln(stdout, rep.String())
	classes := make([]string, 0, len(rep.Stayed))
	for c := range rep.Stayed {
		classes = append(classes, c)
	}
	slices.Sort(classes)
	for _, c := range classes {
		fmt.Fprintf(stdout, "%d stayed: %s\n", rep.Stayed[c], c)
	}
	if err != nil && ids == nil {
		// The batches up to rep.Last are committed: the next run need not
		// check them again.
		last := max(rep.Last, after)
		return fmt.Errorf("%w; stopped after record %d, resume with: billing nats replay --all --after %d", err, last, last)
	}
	return err
}

package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/acme/outboxpair/billing"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/labeling"
)

// orgs is how many organisations the generated events spread over: enough that
// the quota upsert is not one hot row, few enough that rows are shared.
const orgs = 100

// relayConfig is the relay the binaries run: the OUTBOX_* variables read by
// infra/env's Relay, as both binaries' loaders read them, from lookup (this
// process's environment, which the binaries inherit), so the in-process rows
// and the binaries run the same settings, OUTBOX_NOTIFY and OUTBOX_WORKERS
// included. The fields named in set (-relay-set) are applied on top, in process
// only, by reflection, so that a field added later can be set without changing
// this program.
func relayConfig(lookup envvar.Lookup, set string) (outbox.Config, error) {
	r := envvar.New(lookup)
	cfg := r.Relay()
	if err := r.Err(); err != nil {
		return outbox.Config{}, fmt.Errorf("relay settings from the environment: %w", err)
	}
	if set == "" {
		return cfg, nil
	}
	v := reflect.ValueOf(&cfg).Elem()
	for _, kv := range strings.Split(set, ",") {
		name, val, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return cfg, fmt.Errorf("-relay-set: %q is not Field=value", kv)
		}
		f := v.FieldByName(name)
		if !f.IsValid() || !f.CanSet() {
			return cfg, fmt.Errorf("-relay-set: outbox.Config has no field %s", name)
		}
		if err := setField(f, val); err != nil {
			return cfg, fmt.Errorf("-relay-set: %s: %w", name, err)
		}
	}
	return cfg, nil
}

func setField(f reflect.Value, val string) error {
	if f.Type() == reflect.TypeFor[time.Duration]() {
		d, err := time.ParseDuration(val)
		if err != nil {
			return err
		}
		f.SetInt(int64(d))
		return nil
	}
	switch f.Kind() {
	case reflect.Bool:
		b, err := strconv.ParseBool(val)
		if err != nil {
			return err
		}
		f.SetBool(b)
	case reflect.Int, reflect.Int32, reflect.Int64:
		n, err := strconv.ParseInt(val, 10, 64)
		if err != nil {
			return err
		}
		f.SetInt(n)
	case reflect.String:
		f.SetString(val)
	default:
		return fmt.Errorf("unsupported kind %s", f.Kind())
	}
	return nil
}

// preloadOutbox inserts n pending RuleActivated rows into outbox_events, oldest
// first, as Append would write them (payload {"orgId","ruleId"}), in one
// statement per 50k rows.
func preloadOutbox(ctx context.Context, pool *pgxpool.Pool, n int) error {
	now := time.Now().UnixMilli()
	for start := 0; start < n; start += 50000 {
		end := min(n, start+50000) - 1
		_, err := pool.Exec(ctx, `
			INSERT INTO outbox_events (id, event_tag, payload, created_at, available_at, attempts)
			SELECT gen_random_uuid(), 'RuleActivated',
				jsonb_build_object('orgId', md5('org' || (i % $3))::uuid, 'ruleId', gen_random_uuid()),
				$1::bigint - $4::bigint + i, $1::bigint - $4::bigint + i, 0
			FROM generate_series($2::int, $5::int) AS i`, now, start, orgs, n, end)
		if err != nil {
			return fmt.Errorf("preload outbox: %w", err)
		}
	}
	return nil
}

func analyze(ctx context.Context, pool *pgxpool.Pool, table string) error {
	_, err := pool.Exec(ctx, "ANALYZE "+pgx.Identifier{table}.Sanitize())
	return err
}

// errLimit is a drain that did not finish within -drain-limit.
var errLimit = errors.New("drain limit reached")

// drainRate is n rows over the time from start to end; a drain cut off by the
// limit counts only the rows it drained, and says so in the notes.
func (b *bench) drainRate(what string, n int, start, end time.Time, left int64, err error) (float64, error) {
	if errors.Is(err, errLimit) {
		b.res.note("%s: only %d of %d rows drained within -drain-limit %s; its rate is rows drained / time", what, int64(n)-left, n, b.opt.drainLimit)
		logf("%s: cut off by -drain-limit with %d rows left", what, left)
		err = nil
	}
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	rate, err := rateOf(n, left, start, end)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return rate, nil
}

// rateOf is the rows drained (n less the rows left) per second from start (the
// backlog's commit) to end (the last effect). An end not after the start means
// the stamps are wrong (an effect stamped before its row existed), never a fast
// drain.
func rateOf(n int, left int64, start, end time.Time) (float64, error) {
	d := end.Sub(start)
	if d <= 0 {
		return 0, fmt.Errorf("the last effect (%s) is not after the backlog's commit (%s)", end.Format(time.RFC3339Nano), start.Format(time.RFC3339Nano))
	}
	return float64(int64(n)-left) / d.Seconds(), nil
}

// projectDrain measures rows/s of one in-process relay draining a backlog of
// n rows, timed as drain.go says, on a fresh labeling database (the pool or
// files the services open). With bil set the relay applies each event with
// billing's Apply on bil, and the drain ends at its last receipt; else its
// subscribers do nothing.
func (b *bench) projectDrain(ctx context.Context, n int, analyzed bool, bil *billingDB) (float64, error) {
	lab, err := b.newLabeling(ctx, false)
	if err != nil {
		return 0, err
	}
	defer lab.close()
	pr := b.probes()
	subs, endDB, endSQL := noopSubs(), lab.q, pr.noopEnd
	if bil != nil {
		subs, endDB, endSQL = applySubs(billing.NewService(bil.port, quiet())), bil.q, pr.receiptsEnd
	}
	relay, err := newRelay(lab.store, b.relayCfg, subs)
	if err != nil {
		return 0, err
	}
	if err := relay.Start(ctx); err != nil {
		return 0, err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = stopRelay(relay.Relay) // an error path: the database is dropped anyway
		}
	}()
	// On PostgreSQL the backlog's transaction carries the relays' wake-up; on
	// SQLite the appending process nudges its relay after the commit, as a use
	// case does (a Nudge there only wakes the relay: nothing is broadcast).
	commit := func(n int, analyzed bool) (time.Time, error) {
		start, err := lab.commit(ctx, n, analyzed)
		if err == nil && b.opt.sqlite {
			relay.nudge()
		}
		return start, err
	}
	if _, err := warmUp(ctx, func() (time.Time, error) { return commit(1, false) },
		noRow(ctx, lab.q, pr.pending), stampOf(ctx, endDB, endSQL)); err != nil {
		return 0, err
	}
	start, err := commit(n, analyzed)
	if err != nil {
		return 0, err
	}
	probe := drainProbe{q: lab.q, probe: pr.pending, from: pr.pendingFrom, countLeft: pr.pendingCount, endDB: endDB, endSQL: endSQL}
	end, left, err := probe.wait(ctx, n, b.opt.drainLimit)
	rate, err := b.drainRate(fmt.Sprintf("project drain of %d", n), n, start, end, left, err)
	if err != nil {
		return 0, err
	}
	stopped = true
	if err := stopRelay(relay.Relay); err != nil {
		return 0, err
	}
	return rate, nil
}

func stopRelay(r *outbox.Relay) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.Stop(ctx)
}

func noopSubs() []outbox.Subscriber {
	noop := func(context.Context, outbox.Message) error { return nil }
	return []outbox.Subscriber{{Tag: labeling.TagRuleActivated, Handle: noop}, {Tag: labeling.TagRuleDeactivated, Handle: noop}}
}

// applySubs are subscribers that apply each event with billing's own Apply
// (receipt and quota change in one transaction), in process.
func applySubs(svc *billing.Service) []outbox.Subscriber {
	return labeling.Subscribers(labeling.Events(), func(ctx context.Context, m outbox.Message) error {
		e, err := svc.Decode(m.ID, m.Tag, m.CreatedAt, m.Payload)
		if err != nil {
			return err
		}
		_, err = svc.Apply(ctx, e)
		return err
	})
}

// projectConsumerDrain is the relay applying a backlog of n events to billing
// in process.
func (b *bench) projectConsumerDrain(ctx context.Context, n int) (float64, error) {
	bil, err := b.newBilling(ctx, false)
	if err != nil {
		return 0, err
	}
	defer bil.close()
	return b.projectDrain(ctx, n, false, bil)
}

func quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

// relayHandle is a relay whose Nudge is called only if the relay has one, so
// this program builds against any version of the relay that keeps NewRelay.
type relayHandle struct{ *outbox.Relay }

func newRelay(store outbox.Store, cfg outbox.Config, subs []outbox.Subscriber) (relayHandle, error) {
	r, err := outbox.NewRelay(store, cfg, subs, quiet())
	return relayHandle{r}, err
}

func (r relayHandle) nudge() {
	if n, ok := any(r.Relay).(interface{ Nudge() }); ok {
		n.Nudge()
	}
}

package sitting

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/acme/outboxpair/billing"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/labeling"
)

// EventsToken is the EVENTS_TOKEN both binaries run with.
const EventsToken = "bench-events-token"

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

// liteBounds are the database bounds the binaries run with (DB_STATEMENT_TIMEOUT,
// DB_LOCK_TIMEOUT from this environment), for every file this program opens.
func liteBounds(lookup envvar.Lookup) (sqldb.Bounds, error) {
	r := envvar.New(lookup)
	b := r.Bounds()
	return b, r.Err()
}

// Relay is a relay whose Nudge is called only if the relay has one, so
// this program builds against any version of the relay that keeps NewRelay.
type Relay struct{ *outbox.Relay }

// NewRelay is outbox.NewRelay on store with cfg and subs, logging nothing.
func NewRelay(store outbox.Store, cfg outbox.Config, subs []outbox.Subscriber) (Relay, error) {
	r, err := outbox.NewRelay(store, cfg, subs, Quiet())
	return Relay{r}, err
}

// Nudge wakes the relay as an append in its process does, if the relay can be
// woken so.
func (r Relay) Nudge() {
	if n, ok := any(r.Relay).(interface{ Nudge() }); ok {
		n.Nudge()
	}
}

// StopRelay stops r within 30s, whatever context its caller has left.
func StopRelay(r *outbox.Relay) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return r.Stop(ctx)
}

// NoopSubs are subscribers to labeling's two events that do nothing.
func NoopSubs() []outbox.Subscriber {
	noop := func(context.Context, outbox.Message) error { return nil }
	return []outbox.Subscriber{{Tag: labeling.TagRuleActivated, Handle: noop}, {Tag: labeling.TagRuleDeactivated, Handle: noop}}
}

// ApplySubs are subscribers that apply each event with billing's own Apply
// (receipt and quota change in one transaction), in process.
func ApplySubs(svc *billing.Service) []outbox.Subscriber {
	return labeling.Subscribers(labeling.Events(), func(ctx context.Context, m outbox.Message) error {
		e, err := svc.Decode(m.ID, m.Tag, m.CreatedAt, m.Payload)
		if err != nil {
			return err
		}
		_, err = svc.Apply(ctx, e)
		return err
	})
}

// Quiet is a logger that discards everything.
func Quiet() *slog.Logger { return slog.New(slog.DiscardHandler) }

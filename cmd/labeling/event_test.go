package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/billing"
	"github.com/acme/outboxpair/cmd/labeling/config"
	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/database"
	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/postgres"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/sqlite"
	"github.com/acme/outboxpair/infra/stream"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/infra/wire"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/labeling"
	"github.com/acme/outboxpair/migrations"
)

// rulesImported is a third event, added as docs/events.md says and nowhere
// else: its type, one Publish line in labeling's list, one Handle line in
// billing's registry.
type rulesImported struct {
	OrgID uuid.UUID `json:"orgId"`
	Count int64     `json:"count"`
}

const tagRulesImported = "RulesImported"

func (rulesImported) EventTag() string { return tagRulesImported }

func (e rulesImported) Validate() error {
	switch {
	case e.OrgID == uuid.Nil:
		return errors.New("orgId is missing or nil")
	case e.Count < 1:
		return errors.New("count must be positive")
	}
	return nil
}

// importedPayload is the part of RulesImported billing reads.
type importedPayload struct {
	OrgID *string `json:"orgId"`
	Count *int64  `json:"count"`
}

// importedEffect is billing's handler of RulesImported: count more active rules.
func importedEffect(p importedPayload) (billing.Effect, error) {
	if p.OrgID == nil || p.Count == nil || *p.Count < 1 {
		return billing.Effect{}, errors.New("orgId and a positive count are required")
	}
	org, err := wire.ParseID(*p.OrgID)
	if err != nil {
		return billing.Effect{}, errors.New("orgId must be a UUID")
	}
	return billing.Effect{OrgID: org, Delta: *p.Count}, nil
}

// labelingApps serializes the in-process labeling apps of this file: the
// outbox module registers its backlog gauges process-wide while an app runs.
var labelingApps sync.Mutex

// labelingApp is labeling's serve wiring (serveOptions) with the list events,
// started in process; it returns the app's database, outbox store and nudger,
// through which the test appends as the use cases do.
func labelingApp(t *testing.T, env map[string]string, events []labeling.Publication) (sqldb.DB, outbox.Store, outbox.Nudger) {
	t.Helper()
	lookup := func(name string) (string, bool) { v, ok := env[name]; return v, ok }
	cfg, err := config.LoadLabeling(lookup)
	require.NoError(t, err)
	authCfg, err := envvar.LoadAuth(lookup)
	require.NoError(t, err)
	var (
		db     sqldb.DB
		store  outbox.Store
		nudger outbox.Nudger
	)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	app := fx.New(app(cfg, authCfg.Settings(), lookup).Options(logger, serveOptions(cfg, logger, events)),
		fx.Populate(&db, &store, &nudger), fx.NopLogger)
	require.NoError(t, app.Err())
	labelingApps.Lock()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := app.Start(ctx); err != nil {
		labelingApps.Unlock()
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		defer labelingApps.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, app.Stop(ctx))
	})
	return db, store, nudger
}

// appendInTx runs fn in a transaction of db's dialect, handing it the outbox
// append of that dialect bound to the transaction, as a use case appends.
func appendInTx(ctx context.Context, db sqldb.DB, fn func(func(outbox.Event) (uuid.UUID, error)) error) error {
	return database.Pick(db, database.Dialects[error]{
		Postgres: func(d *postgres.DB) error { return appendIn(ctx, d, outbox.NewPostgresStore(d.Pool), fn) },
		SQLite:   func(d *sqlite.DB) error { return appendIn(ctx, d, outbox.NewSQLiteStore(d), fn) },
	})
}

func appendIn[TX any](ctx context.Context, db sqldb.Transactor[TX], a outbox.Appender[TX], fn func(func(outbox.Event) (uuid.UUID, error)) error) error {
	return db.InTx(ctx, sqldb.TxOptions{}, func(tx TX) error {
		return fn(func(e outbox.Event) (uuid.UUID, error) { return outbox.Append(ctx, a, tx, e) })
	})
}

// billingWith is billing's service on db applying billing's registry plus
// handlers, as Handling documents for a type added to Events.
func billingWith(db *dbtest.DB, handlers ...billing.EventHandler) *billing.Service {
	return billing.NewService(db.DB, slog.New(slog.NewTextHandler(io.Discard, nil)),
		billing.Handling(append(billing.Events(), handlers...)...))
}

func TestAddAnEvent(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		for _, transport := range []string{config.TransportHTTP, config.TransportNATS} {
			t.Run("a third event added to both lists is delivered over "+transport+" and applied once", func(t *testing.T) {
				t.Parallel()
				bdb := dbtest.New(t, d, migrations.Billing)
				svc := billingWith(bdb, billing.Handle(tagRulesImported, importedEffect))
				logger := slog.New(slog.NewTextHandler(io.Discard, nil))

				ldb := dbtest.New(t, d, migrations.Labeling)
				env := baseEnv(ldb.URL)
				env["EVENTS_TRANSPORT"] = transport
				env["OUTBOX_POLL_INTERVAL"] = "50ms"
				env["OUTBOX_RETRY_BASE"] = "50ms"
				env["OUTBOX_RETRY_MAX"] = "200ms"
				if transport == config.TransportNATS {
					ns := natsServer(t)
					env["NATS_URL"] = ns.ClientURL()
					handle, err := svc.NATSHandler(billing.NATSConfig{Key: []byte(env["EVENTS_TOKEN"])})
					require.NoError(t, err)
					c, err := stream.NewConsumer(stream.ConsumerConfig{URL: ns.ClientURL(), Durable: billing.Durable,
						NakBase: 50 * time.Millisecond, NakMax: 200 * time.Millisecond}, handle, logger)
					require.NoError(t, err)
					require.NoError(t, c.Start(context.Background()))
					t.Cleanup(func() { _ = c.Stop(context.Background()) })
				} else {
					h, err := billing.NewHandler(svc, billing.Config{EventsToken: env["EVENTS_TOKEN"]})
					require.NoError(t, err)
					e := web.New(logger, bdb.DB)
					h.Register(e, auth.Disabled())
					srv := httptest.NewServer(e)
					t.Cleanup(srv.Close)
					env["BILLING_URL"] = srv.URL
				}

				db, _, nudger := labelingApp(t, env, append(labeling.Events(), labeling.Publish[rulesImported]()))
				ctx := context.Background()
				org := uuid.New()
				var ids []uuid.UUID
				require.NoError(t, appendInTx(ctx, db, func(app func(outbox.Event) (uuid.UUID, error)) error {
					for _, e := range []outbox.Event{rulesImported{OrgID: org, Count: 3}, labeling.RuleActivated{OrgID: org, RuleID: uuid.New()}} {
						id, err := app(e)
						if err != nil {
							return err
						}
						ids = append(ids, id)
					}
					return nil
				}))
				nudger.Nudge()

				require.Eventually(t, func() bool {
					return bdb.Count(t, `SELECT count(*) FROM billing_receipts`) == 2
				}, 30*time.Second, 20*time.Millisecond, "both events delivered over %s", transport)
				for _, id := range ids {
					require.Equal(t, 1, bdb.Count(t, `SELECT count(*) FROM billing_receipts WHERE event_id = $1`, id.String()), "one receipt each")
				}
				q, err := svc.Quota(ctx, org)
				require.NoError(t, err)
				require.EqualValues(t, 3+1, q.ActiveRules, "RulesImported's effect (3) once, beside RuleActivated's (1)")
				require.Eventually(t, func() bool {
					return ldb.Count(t, `SELECT count(*) FROM outbox_events WHERE processed_at IS NOT NULL`) == 2
				}, 30*time.Second, 20*time.Millisecond, "both rows settled as processed")
				require.Zero(t, ldb.Count(t, `SELECT count(*) FROM outbox_events WHERE failed_at IS NOT NULL`))
			})
		}
	})
}

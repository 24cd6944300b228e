package service

import (
	"log/slog"

	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/auth"
	"github.com/acme/outboxpair/infra/database"
	"github.com/acme/outboxpair/infra/retention"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/infra/web"
)

// App is what every service's `serve` has in common: its name, its database,
// its HTTP server, its retention's settings and its authentication. A slice
// adds its own modules after these (App.Options); both binaries are built from
// this one skeleton, so the order of the shared modules, which is the stop
// order of contract section 5, cannot drift between them.
type App struct {
	// Name is the service's name: the logger's service attribute and the
	// tracer's default service.name.
	Name string
	// Database is the database to open and migrate at start.
	Database database.Config
	// DatabaseDefaulted says DATABASE_URL was unset, so Database.URL is the
	// default SQLite file: said once at start.
	DatabaseDefaulted bool
	// HTTP is the HTTP server's settings; Addr is the address it listens on.
	HTTP web.Config
	// Cleanup is the retention's settings.
	Cleanup retention.Config
	// Auth is the bearer-token verifier's settings (AUTH_DISABLED included).
	Auth auth.Settings
	// Lookup reads the environment, for the tracer (OTEL_*).
	Lookup func(string) (string, bool)
}

// Serve runs a: it says at start what the settings imply (the default
// database file, a listener open to the network with authentication off),
// then runs the shared modules and the slice's until SIGINT or SIGTERM
// (Run).
func Serve(a App, logger *slog.Logger, slice ...fx.Option) error {
	if a.DatabaseDefaulted {
		LogDefaultDatabase(logger, a.Database.URL)
	}
	WarnOpenListen(logger, a.HTTP.Addr, a.Auth.Disabled)
	return Run(a.Options(logger, slice...))
}

// Options is a's fx app: the shared modules, then the slice's, which stop
// after the HTTP server has drained (Run stops the server first) and before
// the pool closes, in the reverse of their order here. The slice lists
// retention.Module itself among its own modules, since where the retention
// stops relative to a slice's background work (a relay, a consumer) is the
// slice's order to keep. Tests build it without running it.
func (a App) Options(logger *slog.Logger, slice ...fx.Option) fx.Option {
	return fx.Options(
		fx.Supply(
			logger,
			a.Database,
			a.HTTP,
			a.Cleanup,
			a.Auth,
			telemetry.Config{Service: a.Name, Lookup: a.Lookup},
		),
		// First, so its flush stops last; off (and free) unless
		// OTEL_EXPORTER_OTLP_ENDPOINT is set.
		telemetry.Module,
		fx.Provide(func(db sqldb.DB) web.Pinger { return db }),
		// Closed after every user of it has stopped, within its own share.
		database.Module,
		web.Module,
		auth.Module,
		fx.Options(slice...),
	)
}

// LogDefaultDatabase says, at start, that DATABASE_URL was unset and which
// SQLite file is used instead (serve and migrate alike).
func LogDefaultDatabase(logger *slog.Logger, url string) {
	logger.Info("DATABASE_URL is unset; using the SQLite file "+url+" under the working directory", "database_url", url)
}

// Package service is what both binaries do around their fx app: the JSON logger,
// running until SIGINT or SIGTERM with bounded start and an ordered, budgeted stop,
// and the healthcheck subcommand that container health checks run.
package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"go.uber.org/dig"
	"go.uber.org/fx"

	envvar "github.com/acme/outboxpair/infra/env"
	"github.com/acme/outboxpair/infra/stopbudget"
	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/infra/web"
)

// StopGrace is what an orchestrator gives a process between SIGTERM and SIGKILL
// by default (Kubernetes' terminationGracePeriodSeconds; docker-compose.yml's
// stop_grace_period): the stop budget, the sum of the declared shares, stays
// under it for every HTTP_REQUEST_TIMEOUT the configuration accepts
// (web.MaxRequestTimeout); cmd's tests hold each service to it.
const StopGrace = 30 * time.Second

// StartTimeout bounds start-up, including waiting for another replica's migrations.
const StartTimeout = 2 * time.Minute

// Logger returns the logger every process uses: one JSON object a line on stdout.
// A line logged with a context inside a traced operation carries trace_id and
// span_id (telemetry.LogHandler).
func Logger(service string) *slog.Logger {
	return slog.New(telemetry.LogHandler(slog.NewJSONHandler(os.Stdout, nil))).With("service", service)
}

// Run starts an fx app built from opts, waits for SIGINT or SIGTERM, and stops it.
// The app must provide a *web.Server (web.Module); Run puts it in the lifecycle
// last, so it starts once everything it serves has started, and on SIGTERM it is
// the first to stop: new connections are refused and /readyz answers 503 at once,
// the requests in flight are answered within the server's share (its
// DrainTimeout), and only then do the background components stop, each within
// the share it declared (infra/stopbudget), and the pool close. The whole stop
// is bounded by the sum of the declared shares, computed, so each step gets its
// full share. It returns an error when the app fails to build, start or stop
// cleanly.
func Run(opts ...fx.Option) error {
	var shares []stopbudget.Share
	app := fx.New(append(Options(&shares, opts...), fx.NopLogger, fx.StartTimeout(StartTimeout))...)
	if err := app.Err(); err != nil {
		// Only the error a constructor returned: fx and dig wrap it in the
		// chain of types that led to it (hundreds of characters of internal
		// names), and a constructor's error already names the setting
		// (DATABASE_URL: ...), as contract section 1 asks of a bad setting.
		return dig.RootCause(err)
	}
	startCtx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		return err
	}
	<-app.Wait()
	stopCtx, cancel := context.WithTimeout(context.Background(), stopbudget.Total(shares))
	defer cancel()
	return app.Stop(stopCtx)
}

// Options is the app Run runs: opts, then the server's hook (appended last, so
// it stops first, bounded by the server's share, web.StopStep), and the
// shares every component declared, which *shares receives when the app is
// built. A test builds it (fx.New, nothing started) to see the shares and,
// with stopbudget.Audit, any component that stops without one.
func Options(shares *[]stopbudget.Share, opts ...fx.Option) []fx.Option {
	return append(opts,
		// A root-level Invoke runs after every module's, so this hook is appended
		// last: fx stops hooks in reverse order.
		fx.Invoke(fx.Annotate(
			func(lc fx.Lifecycle, s *web.Server, step *stopbudget.Step) {
				lc.Append(fx.Hook{OnStart: s.Start, OnStop: step.Bound(s.Stop)})
			},
			fx.ParamTags(``, ``, stopbudget.StepTag(web.StopStep)),
		)),
		fx.Invoke(fx.Annotate(
			func(declared []stopbudget.Share) { *shares = declared },
			fx.ParamTags(stopbudget.Group),
		)),
	)
}

// Within is stopbudget.Within: stop bounded by d, returning at d whatever stop
// does.
func Within(d time.Duration, stop func(context.Context) error) func(context.Context) error {
	return stopbudget.Within(d, stop)
}

// Healthcheck asks the server listening on addr (an HTTP_ADDR value) for /readyz
// and returns nil only on 200. It needs no shell tools in the image.
func Healthcheck(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("HTTP_ADDR: %q: %w", addr, err)
	}
	if host == "" || host == "0.0.0.0" || host == "::" {
		host = "127.0.0.1"
	}
	// A transport of its own: http.DefaultTransport's idle connections are shared
	// with the rest of the process, and closing them elsewhere (a test server's
	// Close) could fail this request.
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + net.JoinHostPort(host, port) + "/readyz")
	if err != nil {
		return fmt.Errorf("HTTP_ADDR %s: no server answers /readyz: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("HTTP_ADDR %s: /readyz answered %d", addr, resp.StatusCode)
	}
	return nil
}

// HealthcheckCommand is a binary's `healthcheck`: nil, printing one line, when
// the server on HTTP_ADDR (def when unset) answers /readyz with 200. It reads
// HTTP_ADDR only: a health check needs no secret and no database.
func HealthcheckCommand(def string) func(lookup envvar.Lookup, stdout, _ io.Writer) error {
	return func(lookup envvar.Lookup, stdout, _ io.Writer) error {
		addr := envvar.LoadHTTPAddr(lookup, def)
		if err := Healthcheck(addr); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "ready: the server on %s answered /readyz with 200\n", addr)
		return nil
	}
}

// WarnOpenListen logs one WARN at start when authentication is off and addr (an
// HTTP_ADDR value) is not on loopback: /v1 then takes changes from anyone who
// can reach the port (contract section 1).
func WarnOpenListen(logger *slog.Logger, addr string, authDisabled bool) {
	if authDisabled && !Loopback(addr) {
		logger.Warn("HTTP_ADDR "+addr+" is reachable from other machines while AUTH_DISABLED=true: anyone who can reach it can change data; unset HTTP_ADDR (127.0.0.1 then) or turn authentication on",
			"http_addr", addr)
	}
}

// Loopback says whether addr (host:port) listens on loopback only: a loopback
// IP (127.0.0.0/8, ::1) or "localhost", which resolves to one. An empty host,
// 0.0.0.0 or :: is every interface.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

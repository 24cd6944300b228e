// Package service is what both binaries do around their fx app: the JSON logger,
// running until SIGINT or SIGTERM with bounded start and an ordered, budgeted stop,
// and the healthcheck subcommand that container health checks run.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"go.uber.org/dig"
	"go.uber.org/fx"

	"github.com/acme/outboxpair/infra/telemetry"
	"github.com/acme/outboxpair/infra/web"
)

// The shares of the stop budget. The HTTP server's share is its DrainTimeout (the
// request timeout plus a little); each background component gets its own share,
// so a relay whose subscriber hangs cannot starve the HTTP drain and vice versa.
const (
	// RelayStopTimeout bounds the outbox relay's Stop: waiting for its dispatches,
	// then cancelling them and releasing every unsettled claim.
	RelayStopTimeout = 8 * time.Second
	// CleanupStopTimeout bounds the retention loop's Stop.
	CleanupStopTimeout = 2 * time.Second
	// closeReserve is for what stops last: closing the pool once every user of
	// it has stopped, then flushing the spans.
	closeReserve = 2 * time.Second
	// TelemetryStopTimeout bounds the flush of buffered spans, which stops last:
	// taken from closeReserve, so the whole budget does not grow.
	TelemetryStopTimeout = time.Second
	// PoolStopTimeout bounds closing the database pool: the rest of
	// closeReserve. A pool whose connections a partition holds may not finish
	// closing (each one waits to say goodbye); it is left to the process exit,
	// and the server ends those sessions (idle_in_transaction_session_timeout,
	// infra/postgres), so nothing is lost by not waiting.
	PoolStopTimeout = closeReserve - TelemetryStopTimeout
)

// withinSlack is how much sooner than its share's end a stop's context ends
// (at most; a tenth of a short share).
const withinSlack = 100 * time.Millisecond

// StopGrace is what an orchestrator gives a process between SIGTERM and SIGKILL
// by default (Kubernetes' terminationGracePeriodSeconds; docker-compose.yml's
// stop_grace_period): the stop budget, StopTimeout, stays under it for every
// HTTP_REQUEST_TIMEOUT the configuration accepts (web.MaxRequestTimeout).
const StopGrace = 30 * time.Second

// StartTimeout bounds start-up, including waiting for another replica's migrations.
const StartTimeout = 2 * time.Minute

// Logger returns the logger every process uses: one JSON object a line on stdout.
// A line logged with a context inside a traced operation carries trace_id and
// span_id (telemetry.LogHandler).
func Logger(service string) *slog.Logger {
	return slog.New(telemetry.LogHandler(slog.NewJSONHandler(os.Stdout, nil))).With("service", service)
}

// StopTimeout is the whole stop budget of an app whose server drains within
// drain: the sum of every share, so each component gets its full share. Run
// returns by it whatever the components or the database do: a step that
// overruns its share only shortens the later ones, and the stop then fails.
func StopTimeout(drain time.Duration) time.Duration {
	return drain + RelayStopTimeout + CleanupStopTimeout + closeReserve
}

// Run starts an fx app built from opts, waits for SIGINT or SIGTERM, and stops it.
// The app must provide a *web.Server (web.Module); Run puts it in the lifecycle
// last, so it starts once everything it serves has started, and on SIGTERM it is
// the first to stop: new connections are refused and /readyz answers 503 at once,
// the requests in flight are answered within the server's DrainTimeout, and only
// then do the background components stop (each within the share StopWithin gave
// it) and the pool close. It returns an error when the app fails to build, start
// or stop cleanly.
func Run(opts ...fx.Option) error {
	var server *web.Server
	app := fx.New(append(opts,
		// A root-level Invoke runs after every module's, so this hook is appended
		// last: fx stops hooks in reverse order.
		fx.Invoke(func(lc fx.Lifecycle, s *web.Server) {
			server = s
			lc.Append(fx.Hook{OnStart: s.Start, OnStop: Within(s.DrainTimeout(), s.Stop)})
		}),
		fx.NopLogger,
		fx.StartTimeout(StartTimeout),
	)...)
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
	stopCtx, cancel := context.WithTimeout(context.Background(), StopTimeout(server.DrainTimeout()))
	defer cancel()
	return app.Stop(stopCtx)
}

// Within returns stop bounded by d: its context ends d after the call (or when the
// caller's ends, if sooner), and it returns then even if stop has not: a
// component that overruns its share (blocked on an unreachable database, say)
// is left to finish in the background until the exit, with an error naming the
// share, so the steps after it still get theirs.
func Within(d time.Duration, stop func(context.Context) error) func(context.Context) error {
	if stop == nil {
		return nil
	}
	return func(ctx context.Context) error {
		hard, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		// stop's own deadline comes a moment before the share ends, so a stop
		// that honours it returns its own answer (nil after a clean give-up)
		// rather than being cut off.
		deadline, _ := hard.Deadline()
		soft, cancelSoft := context.WithDeadline(hard, deadline.Add(-min(d/10, withinSlack)))
		defer cancelSoft()
		done := make(chan error, 1)
		go func() { done <- stop(soft) }()
		select {
		case err := <-done:
			return err
		case <-hard.Done():
			select {
			case err := <-done: // returned at the deadline: its own answer counts
				return err
			default:
			}
			return fmt.Errorf("did not stop within its share of the stop budget (%s): %w", d, hard.Err())
		}
	}
}

// StopWithin groups opts in a module named name in which every lifecycle hook's
// OnStop is bounded by d (Within): a component's own share of the stop budget,
// given without changing the component.
func StopWithin(name string, d time.Duration, opts ...fx.Option) fx.Option {
	return fx.Module(name,
		fx.Decorate(func(lc fx.Lifecycle) fx.Lifecycle { return boundedLifecycle{lc: lc, d: d} }),
		fx.Options(opts...),
	)
}

type boundedLifecycle struct {
	lc fx.Lifecycle
	d  time.Duration
}

func (b boundedLifecycle) Append(h fx.Hook) {
	h.OnStop = Within(b.d, h.OnStop)
	b.lc.Append(h)
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

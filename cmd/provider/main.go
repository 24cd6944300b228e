// Command provider is the stand-in provider (internal/standin): the outside
// service billing's outbox calls, for the walk-through, the compose file and
// the tests. It verifies each call's Standard Webhooks signature, applies each
// Idempotency-Key once in a SQLite file, and tells what it applied at
// GET /applied. docs/calling-the-outside-world.md says how to run it.
//
// It answers 2xx only once the call's key and effect are durable, and makes
// that cheap with a group commit: each handler verifies and parses its call,
// then hands it to the one writer and waits. The writer takes the first call
// waiting and every other call already waiting (at most 256), applies them
// in one SQLite transaction in arrival order (the key inserted or found, the
// org's count, a duplicate counted), and only after its COMMIT has returned,
// which under synchronous=FULL has fsync'ed the WAL, answers each handler;
// a handler answers 2xx only then, and 503 when the commit failed. So the
// calls that arrive during one fsync share the next, none waits on a timer,
// and a crash at any point loses no call that was answered 2xx. A key sent
// twice in one group is applied once and counted a duplicate once. A group
// whose transaction fails is applied again one call at a time, so one call
// that cannot be applied does not fail the others (unless the database is
// unavailable: then the whole group is answered 503 at once).
//
//	provider [serve]      listen on PROVIDER_ADDR until SIGINT/SIGTERM
//	provider healthcheck  exit 0 when the one on PROVIDER_ADDR answers /healthz
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/acme/outboxpair/infra/service"
	"github.com/acme/outboxpair/internal/standin"
)

const usage = `usage: provider [serve | healthcheck | help]

  serve        listen on PROVIDER_ADDR (default ` + standin.DefaultAddr + `) until SIGINT/SIGTERM:
               POST /webhook (signed calls), GET /applied, GET /healthz
  healthcheck  exit 0 when the stand-in on PROVIDER_ADDR answers /healthz

variables: PROVIDER_ADDR, PROVIDER_SECRET (required by serve: one whsec_ secret,
or several separated by spaces, the first verifying), PROVIDER_DB (default
` + standin.DefaultDB + `), PROVIDER_FAIL_EVERY (answer 503 to every Nth call after
applying it; 0, the default, is off)
`

func main() { os.Exit(run(os.Args[1:], os.LookupEnv, os.Stdout, os.Stderr)) }

// run is the command line: 0 success, 1 failure (a bad setting included,
// one line naming the variable), 2 usage error.
func run(args []string, lookup func(string) (string, bool), stdout, stderr io.Writer) int {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	if len(args) > 1 {
		fmt.Fprintf(stderr, "provider: %s takes no arguments\nrun \"provider help\" for the usage\n", cmd)
		return 2
	}
	var err error
	switch cmd {
	case "serve":
		err = serve(lookup)
	case "healthcheck":
		err = healthcheck(lookup, stdout)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "provider: unknown command %q\nrun \"provider help\" for the usage\n", cmd)
		return 2
	}
	if err != nil {
		fmt.Fprintf(stderr, "provider: %v\n", err)
		return 1
	}
	return 0
}

// serve runs the stand-in until SIGINT or SIGTERM, then answers the calls in
// flight (5 s at most) and closes the database.
func serve(lookup func(string) (string, bool)) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	cfg, err := standin.Load(lookup)
	if err != nil {
		return err
	}
	logger := service.Logger("provider")
	srv, err := standin.Open(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer srv.Close()
	l, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return fmt.Errorf("PROVIDER_ADDR: %w", err)
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 5 * time.Second}
	logger.Info("http listening", "addr", l.Addr().String(), "db", cfg.DB, "fail_every", cfg.FailEvery)
	served := make(chan error, 1)
	go func() { served <- hs.Serve(l) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(shutdown); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("stop: %w", err)
	}
	logger.Info("stopped")
	return nil
}

// healthcheck asks the stand-in on PROVIDER_ADDR for /healthz: for the
// compose health check, in an image without a shell.
func healthcheck(lookup func(string) (string, bool), stdout io.Writer) error {
	addr := standin.DefaultAddr
	if v, ok := lookup("PROVIDER_ADDR"); ok && v != "" {
		addr = v
	}
	u, err := standin.HealthURL(addr)
	if err != nil {
		return err
	}
	client := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get(u)
	if err != nil {
		return fmt.Errorf("PROVIDER_ADDR %s: no stand-in answers /healthz: %w", addr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("PROVIDER_ADDR %s: /healthz answered %d", addr, resp.StatusCode)
	}
	fmt.Fprintf(stdout, "ready: the stand-in on %s answered /healthz with 200\n", addr)
	return nil
}

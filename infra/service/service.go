// Package service is what both binaries do around their fx app: the JSON logger,
// running until SIGINT or SIGTERM with bounded start and stop, and the healthcheck
// subcommand that container health checks run.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"go.uber.org/fx"
)

// StopTimeout bounds a graceful stop: draining HTTP requests, finishing or
// abandoning outbox dispatches and releasing their claims.
const StopTimeout = 20 * time.Second

// StartTimeout bounds start-up, including waiting for another replica's migrations.
const StartTimeout = 2 * time.Minute

// Logger returns the logger every process uses: one JSON object a line on stdout.
func Logger(service string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stdout, nil)).With("service", service)
}

// Run starts an fx app built from opts, waits for SIGINT or SIGTERM, and stops it.
// It returns an error when the app fails to build, start or stop cleanly.
func Run(opts ...fx.Option) error {
	app := fx.New(append(opts,
		fx.NopLogger,
		fx.StartTimeout(StartTimeout),
		fx.StopTimeout(StopTimeout),
	)...)
	if err := app.Err(); err != nil {
		return err
	}
	startCtx, cancel := context.WithTimeout(context.Background(), StartTimeout)
	defer cancel()
	if err := app.Start(startCtx); err != nil {
		return err
	}
	<-app.Wait()
	stopCtx, cancel := context.WithTimeout(context.Background(), StopTimeout)
	defer cancel()
	return app.Stop(stopCtx)
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
	client := &http.Client{Timeout: 3 * time.Second}
	resp, err := client.Get("http://" + net.JoinHostPort(host, port) + "/readyz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("readyz answered %d", resp.StatusCode)
	}
	return nil
}

package web

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/labstack/echo/v4"
)

// StopStep names the server's share of the stop budget: its DrainTimeout,
// declared by Module. service.Run bounds the server's stop by it; the
// authentication's key refresh (infra/auth) stops within what the drain left.
const StopStep = "http"

// DefaultRequestTimeout bounds a request when Config.RequestTimeout is 0
// (HTTP_REQUEST_TIMEOUT's default).
const DefaultRequestTimeout = 8 * time.Second

// MaxRequestTimeout is the longest RequestTimeout Validate accepts: it keeps
// the stop budget under an orchestrator's 30 s (service.StopGrace), since the
// drain's share is the request timeout plus 2 s and the other shares take
// 12 s, so 15 s makes a 29 s stop.
const MaxRequestTimeout = 15 * time.Second

// drainSlack is what a drain allows beyond the request timeout: writing the answer
// of a request that used all of its time.
const drainSlack = 2 * time.Second

// Config is what the server needs from the service's configuration.
type Config struct {
	Addr string
	// SecureCookies says browsers reach the service over HTTPS although it
	// serves plain HTTP (a TLS-terminating proxy in front): every request is
	// then Secure (see Secure), so the cookies the console sets carry the
	// Secure attribute. A request that arrived over TLS is Secure either way.
	SecureCookies bool
	// RequestTimeout is the deadline of every request's context (0 means
	// DefaultRequestTimeout): a request waiting on a lock or a slow database ends
	// with a 503 instead of holding its connection for ever.
	RequestTimeout time.Duration
}

// Validate reports a RequestTimeout out of its range (negative, or over
// MaxRequestTimeout) as "RequestTimeout: what is wrong".
func (c Config) Validate() error {
	switch {
	case c.RequestTimeout < 0:
		return fmt.Errorf("RequestTimeout: %s must not be negative", c.RequestTimeout)
	case c.RequestTimeout > MaxRequestTimeout:
		return fmt.Errorf("RequestTimeout: %s is more than the maximum of %s", c.RequestTimeout, MaxRequestTimeout)
	}
	return nil
}

// Server runs an http.Server for the echo instance. Once Stop begins it answers
// every request that had not yet reached a handler with 503 and Connection: close
// (/readyz included, so a load balancer takes it out at once; /healthz and
// /metrics still answer), so a request that arrives after the stop began is never
// committed.
type Server struct {
	srv            *http.Server
	handler        http.Handler
	addr           string
	requestTimeout time.Duration
	ln             net.Listener
	logger         *slog.Logger
	done           chan struct{}
	draining       atomic.Bool
	secure         bool // Config.SecureCookies
}

// NewServer returns a server for e on cfg.Addr; it listens only when started.
func NewServer(cfg Config, e *echo.Echo, logger *slog.Logger) *Server {
	timeout := cfg.RequestTimeout
	if timeout <= 0 {
		timeout = DefaultRequestTimeout
	}
	s := &Server{addr: cfg.Addr, handler: e, requestTimeout: timeout, logger: logger, secure: cfg.SecureCookies}
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      timeout + drainSlack,
		IdleTimeout:       2 * time.Minute,
		// The server's own complaints (a bad TLS handshake, a superfluous
		// WriteHeader) go through slog too: one JSON object a line.
		ErrorLog: slog.NewLogLogger(logger.With("component", "http").Handler(), slog.LevelWarn),
	}
	return s
}

// DrainTimeout is the share of the stop budget Stop needs: the request timeout,
// so that every request in flight can finish, plus a little to write its answer.
func (s *Server) DrainTimeout() time.Duration { return s.requestTimeout + drainSlack }

// ServeHTTP refuses new requests once the server is draining, and gives every
// other request its deadline.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() && r.URL.Path != "/healthz" && r.URL.Path != "/metrics" {
		w.Header().Set("Connection", "close")
		w.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, `{"error":{"code":"unavailable","message":"shutting down, retry on another instance"}}`+"\n")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.requestTimeout)
	defer cancel()
	if s.secure {
		ctx = context.WithValue(ctx, secureKey{}, true)
	}
	inner := r.WithContext(ctx)
	s.handler.ServeHTTP(w, inner)
	// net/http removes the temporary files of the request it passed in, not of
	// this copy's: should a handler ever parse a multipart form (Bodies refuses
	// one on every route), its files must not outlive the request.
	if inner.MultipartForm != nil && inner.MultipartForm != r.MultipartForm {
		_ = inner.MultipartForm.RemoveAll()
	}
}

// secureKey marks the context of a request that Config.SecureCookies says
// reached the service over HTTPS.
type secureKey struct{}

// Secure reports whether r reached the service over HTTPS: it arrived over
// TLS, or the server's Config.SecureCookies says a proxy in front terminates
// TLS. A cookie set in answer to r is Secure when this is true.
func Secure(r *http.Request) bool {
	on, _ := r.Context().Value(secureKey{}).(bool)
	return r.TLS != nil || on
}

// Start listens on the configured address, so that a taken port fails start-up,
// then serves in the background.
func (s *Server) Start(context.Context) error {
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return fmt.Errorf("HTTP_ADDR: listen on %s: %w", s.addr, err)
	}
	s.ln = ln
	s.done = make(chan struct{})
	s.logger.Info("http listening", "addr", ln.Addr().String())
	go func() {
		defer close(s.done)
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.logger.Error("http server stopped", "error", err)
		}
	}()
	return nil
}

// Addr is the address the server listens on, once started.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Stop closes the listener at once (new connections are refused), answers 503 to
// any request that had not reached a handler yet, and lets the requests in flight
// finish until ctx ends; then it closes what is left, logging how it ended.
func (s *Server) Stop(ctx context.Context) error {
	s.draining.Store(true)
	if s.done == nil {
		return nil // never started
	}
	start := time.Now()
	err := s.srv.Shutdown(ctx)
	if err != nil {
		_ = s.srv.Close()
		s.logger.Warn("http drain ran out of its budget; cut the requests still in flight",
			"duration_ms", time.Since(start).Milliseconds(), "error", err)
	} else {
		s.logger.Info("http drained", "duration_ms", time.Since(start).Milliseconds())
	}
	<-s.done
	return nil
}

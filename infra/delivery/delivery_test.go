package delivery_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/delivery"
	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/relaytest"
	"github.com/acme/outboxpair/migrations"
)

const token = "delivery-test-token"

// received is one request as the server saw it.
type received struct {
	method, path string
	header       http.Header
	body         []byte
}

type bundle struct {
	srv         *httptest.Server
	client      *delivery.Client
	newConns    atomic.Int64
	closedConns atomic.Int64

	mu   sync.Mutex
	reqs []received
}

// setup starts a server that records every request and answers with answer, and a
// client pointed at it.
func setup(t *testing.T, answer http.HandlerFunc) *bundle {
	t.Helper()
	b := &bundle{}
	b.srv = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		b.mu.Lock()
		b.reqs = append(b.reqs, received{method: r.Method, path: r.URL.Path, header: r.Header.Clone(), body: body})
		b.mu.Unlock()
		answer(w, r)
	}))
	b.srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		switch s {
		case http.StateNew:
			b.newConns.Add(1)
		case http.StateClosed, http.StateHijacked:
			b.closedConns.Add(1)
		}
	}
	b.srv.Start()
	t.Cleanup(b.srv.Close)
	b.client = newClient(t, delivery.Config{BaseURL: b.srv.URL, Token: token, Timeout: 10 * time.Second})
	return b
}

func newClient(t *testing.T, cfg delivery.Config) *delivery.Client {
	t.Helper()
	c, err := delivery.New(cfg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	return c
}

func (b *bundle) requests() []received {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]received(nil), b.reqs...)
}

func status(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		if body != "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(code)
		_, _ = io.WriteString(w, body)
	}
}

func message() outbox.Message {
	return outbox.Message{
		ID:        uuid.Must(uuid.NewV7()),
		Tag:       "RuleActivated",
		Payload:   json.RawMessage(fmt.Sprintf(`{"orgId":%q,"ruleId":%q}`, uuid.New(), uuid.New())),
		CreatedAt: 1767225600123,
		Attempt:   1,
	}
}

func TestDeliver(t *testing.T) {
	t.Parallel()

	t.Run("posts the envelope with token, idempotency key and content type", func(t *testing.T) {
		t.Parallel()
		b := setup(t, status(http.StatusNoContent, ""))
		m := message()
		require.NoError(t, b.client.Deliver(context.Background(), m))

		reqs := b.requests()
		require.Len(t, reqs, 1)
		r := reqs[0]
		require.Equal(t, http.MethodPost, r.method)
		require.Equal(t, "/internal/v1/events", r.path)
		require.Equal(t, "Bearer "+token, r.header.Get("Authorization"))
		require.Equal(t, m.ID.String(), r.header.Get("Idempotency-Key"))
		require.Equal(t, "application/json", r.header.Get("Content-Type"))

		var got map[string]json.RawMessage
		require.NoError(t, json.Unmarshal(r.body, &got))
		require.Len(t, got, 4, string(r.body))
		require.JSONEq(t, fmt.Sprintf("%q", m.ID), string(got["id"]))
		require.JSONEq(t, `"RuleActivated"`, string(got["type"]))
		require.JSONEq(t, `1767225600123`, string(got["occurredAt"]))
		require.JSONEq(t, string(m.Payload), string(got["payload"]))
	})

	t.Run("a base URL with a path prefix and a trailing slash keeps the prefix", func(t *testing.T) {
		t.Parallel()
		b := setup(t, status(http.StatusNoContent, ""))
		c := newClient(t, delivery.Config{BaseURL: b.srv.URL + "/billing/", Token: token})
		require.NoError(t, c.Deliver(context.Background(), message()))
		require.Equal(t, "/billing/internal/v1/events", b.requests()[0].path)
	})

	for _, code := range []int{http.StatusOK, http.StatusAccepted, http.StatusNoContent} {
		t.Run(fmt.Sprintf("%d is success", code), func(t *testing.T) {
			t.Parallel()
			b := setup(t, status(code, `{"ok":true}`))
			require.NoError(t, b.client.Deliver(context.Background(), message()))
		})
	}

	t.Run("400 fails the row at once, quoting the status and the answer", func(t *testing.T) {
		t.Parallel()
		b := setup(t, status(http.StatusBadRequest, `{"error":{"code":"invalid","message":"payload.orgId must be a UUID"}}`))
		m := message()
		err := b.client.Deliver(context.Background(), m)
		require.Error(t, err)
		require.True(t, outbox.IsPermanent(err), err.Error())
		require.ErrorContains(t, err, "400")
		require.ErrorContains(t, err, "payload.orgId must be a UUID")
		require.ErrorContains(t, err, m.ID.String())
		require.NotContains(t, err.Error(), token)
	})

	t.Run("the quoted answer is bounded", func(t *testing.T) {
		t.Parallel()
		b := setup(t, status(http.StatusBadRequest, strings.Repeat("é", 10_000)))
		err := b.client.Deliver(context.Background(), message())
		require.True(t, outbox.IsPermanent(err))
		require.Less(t, len(err.Error()), 600)
	})

	for _, code := range []int{
		http.StatusUnauthorized, http.StatusNotFound, http.StatusConflict, http.StatusRequestEntityTooLarge,
		http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusNotImplemented,
		http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusMovedPermanently,
	} {
		t.Run(fmt.Sprintf("%d is an ordinary failure the relay retries", code), func(t *testing.T) {
			t.Parallel()
			b := setup(t, status(code, `{"error":{"code":"x","message":"y"}}`))
			err := b.client.Deliver(context.Background(), message())
			require.Error(t, err)
			require.False(t, outbox.IsPermanent(err), err.Error())
			require.ErrorContains(t, err, fmt.Sprint(code))
			require.NotContains(t, err.Error(), token)
		})
	}

	t.Run("the caller's deadline ends a slow delivery as a retry", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		err := b.client.Deliver(ctx, message())
		require.Error(t, err)
		require.False(t, outbox.IsPermanent(err))
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})

	t.Run("the client's own timeout bounds a delivery whose caller set none", func(t *testing.T) {
		t.Parallel()
		release := make(chan struct{})
		t.Cleanup(func() { close(release) })
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-release:
			}
		})
		c := newClient(t, delivery.Config{BaseURL: b.srv.URL, Token: token, Timeout: 200 * time.Millisecond})
		done := make(chan error, 1)
		go func() { done <- c.Deliver(context.Background(), message()) }()
		select {
		case err := <-done:
			require.Error(t, err)
			require.False(t, outbox.IsPermanent(err))
		case <-time.After(10 * time.Second):
			t.Fatal("the delivery did not time out")
		}
	})

	t.Run("a refused connection is an ordinary failure", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		c := newClient(t, delivery.Config{BaseURL: "http://" + addr, Token: token})
		err = c.Deliver(context.Background(), message())
		require.Error(t, err)
		require.False(t, outbox.IsPermanent(err))
		require.NotContains(t, err.Error(), token)
	})

	t.Run("answers are drained and closed, so one connection serves every delivery", func(t *testing.T) {
		t.Parallel()
		var n atomic.Int64
		answers := []http.HandlerFunc{
			status(http.StatusNoContent, ""),
			status(http.StatusInternalServerError, strings.Repeat("x", 8<<10)),
			status(http.StatusBadRequest, strings.Repeat("y", 8<<10)),
			status(http.StatusOK, strings.Repeat("z", 8<<10)),
			status(http.StatusNotImplemented, `{"error":{"code":"not_implemented","message":"no"}}`),
		}
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			answers[int(n.Add(1)-1)%len(answers)](w, r)
		})
		for range 20 {
			_ = b.client.Deliver(context.Background(), message())
		}
		require.Len(t, b.requests(), 20)
		require.EqualValues(t, 1, b.newConns.Load(), "every answer must be read and closed for its connection to be reused")
	})
	t.Run("an answer longer than the drain bound is closed, not read to its end", func(t *testing.T) {
		t.Parallel()
		b := setup(t, func(w http.ResponseWriter, r *http.Request) {
			// Bound the write, so a client that never closes cannot hang the server.
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(10 * time.Second))
			w.WriteHeader(http.StatusInternalServerError)
			chunk := []byte(strings.Repeat("x", 32<<10))
			for range 64 { // 2 MiB, far more than any socket buffers
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
		})
		err := b.client.Deliver(context.Background(), message())
		require.Error(t, err)
		require.False(t, outbox.IsPermanent(err))
		require.Eventually(t, func() bool { return b.closedConns.Load() == 1 }, 5*time.Second, 10*time.Millisecond,
			"the client must close the answer's connection")
	})
}

func TestNew(t *testing.T) {
	t.Parallel()

	for _, u := range []string{"", "localhost:8081", "ftp://billing", "http://", "://x"} {
		t.Run(fmt.Sprintf("base URL %q is refused naming BILLING_URL", u), func(t *testing.T) {
			t.Parallel()
			_, err := delivery.New(delivery.Config{BaseURL: u, Token: token}, slog.Default())
			require.ErrorContains(t, err, "BILLING_URL")
		})
	}

	t.Run("a refused base URL is quoted without its credentials", func(t *testing.T) {
		t.Parallel()
		_, err := delivery.New(delivery.Config{BaseURL: "ftp://user:pw@billing/in?token=s3cret", Token: token}, slog.Default())
		require.EqualError(t, err, `BILLING_URL: "ftp://billing/in" is not an http(s) URL`)
	})

	t.Run("an empty token is refused naming EVENTS_TOKEN", func(t *testing.T) {
		t.Parallel()
		_, err := delivery.New(delivery.Config{BaseURL: "http://localhost:8081"}, slog.Default())
		require.ErrorContains(t, err, "EVENTS_TOKEN")
	})
}

// ruleActivated stands in for labeling's event: the subscriber is generic.
type ruleActivated struct {
	OrgID  string `json:"orgId"`
	RuleID string `json:"ruleId"`
}

func (ruleActivated) EventTag() string { return "RuleActivated" }

func (e ruleActivated) Validate() error {
	if _, err := uuid.Parse(e.OrgID); err != nil {
		return errors.New("orgId must be a UUID")
	}
	if _, err := uuid.Parse(e.RuleID); err != nil {
		return errors.New("ruleId must be a UUID")
	}
	return nil
}

func TestSubscriber(t *testing.T) {
	t.Parallel()

	t.Run("subscribes to the event's tag and delivers a valid payload", func(t *testing.T) {
		t.Parallel()
		b := setup(t, status(http.StatusNoContent, ""))
		sub := delivery.Subscriber[ruleActivated](b.client)
		require.Equal(t, "RuleActivated", sub.Tag)
		m := message()
		require.NoError(t, sub.Handle(context.Background(), m))
		reqs := b.requests()
		require.Len(t, reqs, 1)
		require.Equal(t, m.ID.String(), reqs[0].header.Get("Idempotency-Key"))
	})

	t.Run("an invalid payload fails the row at once without a request", func(t *testing.T) {
		t.Parallel()
		b := setup(t, status(http.StatusNoContent, ""))
		sub := delivery.Subscriber[ruleActivated](b.client)
		m := message()
		m.Payload = json.RawMessage(`{"orgId":"acme","ruleId":"x"}`)
		err := sub.Handle(context.Background(), m)
		require.True(t, outbox.IsPermanent(err))
		require.Empty(t, b.requests())
	})

	t.Run("billing's answer still decides the settlement", func(t *testing.T) {
		t.Parallel()
		b := setup(t, status(http.StatusServiceUnavailable, ""))
		err := delivery.Subscriber[ruleActivated](b.client).Handle(context.Background(), message())
		require.Error(t, err)
		require.False(t, outbox.IsPermanent(err))
	})
}

// TestURLCredentialsAreNeverQuoted: BILLING_URL carries a user, a password and
// a token in its query, which reach billing (the query is kept before the
// path is joined). Whether nothing listens or billing answers 500 (retried)
// or 400 (dead-lettered) with an answer that echoes the request target, the
// row's last_error and every log line quote the call without them.
func TestURLCredentialsAreNeverQuoted(t *testing.T) {
	t.Parallel()
	echo := func(code int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(code)
			_, _ = io.WriteString(w, "cannot take POST "+r.URL.RequestURI())
		}
	}
	for _, c := range []struct {
		name   string
		answer http.HandlerFunc // nil: nothing listens
		want   string           // in last_error; {addr} is billing's
		failed bool
	}{
		{"a refused connection is retried, quoted without them", nil,
			`Post "http://{addr}/internal/v1/events": dial tcp {addr}: connect: connection refused`, false},
		{"a 500 is retried, its answer quoted without them", echo(http.StatusInternalServerError),
			"billing answered 500 Internal Server Error: cannot take POST /internal/v1/events?***", false},
		{"a 400 is dead-lettered, its answer quoted without them", echo(http.StatusBadRequest),
			"billing answered 400 Bad Request: cannot take POST /internal/v1/events?***", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
				addr := relaytest.ClosedAddr(t)
				if c.answer != nil {
					addr = strings.TrimPrefix(setup(t, c.answer).srv.URL, "http://")
				}
				log := relaytest.NewLog()
				client, err := delivery.New(delivery.Config{
					BaseURL: "http://user:pw@" + addr + "?token=s3cret", Token: token, Timeout: 5 * time.Second,
				}, log.Logger)
				require.NoError(t, err)
				f := relaytest.Fail(t, dbtest.New(t, d, migrations.Labeling), outbox.DefaultTable, "RuleActivated",
					string(message().Payload), delivery.Subscriber[ruleActivated](client), log)
				require.Contains(t, f.LastError, strings.ReplaceAll(c.want, "{addr}", addr))
				require.Equal(t, c.failed, f.Failed, "dead-lettered")
				for _, text := range []string{f.LastError, f.Log} {
					require.NotContains(t, text, "s3cret")
					require.NotContains(t, text, "pw")
					require.NotContains(t, text, "user")
				}
			})
		})
	}
}

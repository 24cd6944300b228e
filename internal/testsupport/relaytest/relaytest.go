// Package relaytest runs one outbox row through a real relay on a real
// database (either dialect, dbtest's) and gives back what an operator would
// see of its failure: the row's last_error, which `outbox failed` and the
// console show, and every line the relay and its subscriber logged.
package relaytest

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/outbox"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
	"github.com/acme/outboxpair/internal/testsupport/proctest"
)

// Log is a logger of every level and the buffer it writes, read by the test.
type Log struct {
	Logger *slog.Logger
	Buf    *proctest.Buffer
}

// NewLog returns a Log: give its Logger to the subscriber's client too, so
// its lines are captured with the relay's.
func NewLog() Log {
	buf := &proctest.Buffer{}
	return Log{Logger: slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), Buf: buf}
}

// Failure is what one failed attempt of a row left.
type Failure struct {
	LastError string // the row's last_error
	Failed    bool   // the row was dead-lettered (failed_at set), not left for a retry
	Log       string // every line logged, by the relay and by whatever logged to the Log
}

// Fail writes a pending row of tag and payload (JSON) to table, runs one pass
// of a relay on it with sub as its only subscriber, logging to log, and
// returns what the failed attempt left once the relay has logged it at WARN.
// The test fails if the attempt succeeded.
func Fail(t *testing.T, db *dbtest.DB, table, tag, payload string, sub outbox.Subscriber, log Log) Failure {
	t.Helper()
	id := uuid.Must(uuid.NewV7())
	now := time.Now().UnixMilli()
	db.Exec(t, `INSERT INTO `+table+` (id, event_tag, payload, created_at, available_at, attempts)
		VALUES ($1, $2, $3, $4, $4, 0)`, id, tag, payload, now)

	relay, err := outbox.NewRelay(outbox.NewStore(db.DB, outbox.WithTable(table)), outbox.Config{
		PollInterval: time.Second, ClaimSize: 10, HandlerTimeout: 5 * time.Second, Lease: time.Minute,
		MaxAttempts: 5, RetryBase: time.Second, RetryMax: time.Hour, ProcessedRetention: time.Hour,
	}, []outbox.Subscriber{sub}, log.Logger)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, relay.Stop(context.Background())) })
	n, err := relay.RunOnce(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, n, "the row is claimed")

	var f Failure
	var lastError *string
	var failedAt *int64
	require.NoError(t, db.QueryRow(`SELECT last_error, failed_at FROM `+table+` WHERE id = $1`, id).Scan(&lastError, &failedAt))
	require.NotNil(t, lastError, "the attempt failed")
	f.LastError, f.Failed = *lastError, failedAt != nil
	require.Eventually(t, func() bool { return strings.Contains(log.Buf.String(), "level=WARN") },
		5*time.Second, 10*time.Millisecond, "the relay logs the failure at WARN")
	f.Log = log.Buf.String()
	return f
}

// ClosedAddr is a loopback host:port nothing listens on: a call there is
// refused at once.
func ClosedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

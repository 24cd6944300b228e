package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/pgtest"
)

// Not parallel: it shortens the package's commandTimeout, which only run reads.
func TestMigrateIsBounded(t *testing.T) {
	db := pgtest.Empty(t)
	ctx := t.Context()
	// Another replica is migrating: it holds goose's session lock.
	conn, err := db.Pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var locked bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(4097083626)`).Scan(&locked))
	require.True(t, locked)
	defer func() { _, _ = conn.Exec(ctx, `SELECT pg_advisory_unlock(4097083626)`) }()

	saved := commandTimeout
	commandTimeout = time.Second
	defer func() { commandTimeout = saved }()

	lookup := func(name string) (string, bool) {
		v, ok := map[string]string{"DATABASE_URL": db.URL}[name] // no EVENTS_TOKEN: migrate never delivers
		return v, ok
	}
	done := make(chan int, 1)
	var stdout, stderr bytes.Buffer
	go func() { done <- run([]string{"migrate"}, lookup, &stdout, &stderr) }()

	select {
	case code := <-done:
		require.Equal(t, 1, code, "gave up waiting for the lock")
		require.Equal(t, 1, bytes.Count(stderr.Bytes(), []byte("\n")), "one line: %q", stderr.String())
		require.Contains(t, stderr.String(), "billing: ")
	case <-time.After(30 * time.Second):
		t.Fatal("billing migrate waits for the migration lock without a bound")
	}
}

func TestOperatorCommandsNeedNoToken(t *testing.T) {
	t.Parallel()
	db := pgtest.Empty(t)
	lookup := func(name string) (string, bool) {
		v, ok := map[string]string{"DATABASE_URL": db.URL}[name]
		return v, ok
	}
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run([]string{"migrate"}, lookup, &stdout, &stderr), stderr.String())
	require.Contains(t, stdout.String(), `"msg":"migration applied"`)
}

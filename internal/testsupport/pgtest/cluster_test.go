package pgtest_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/testsupport/pgtest"
	"github.com/acme/outboxpair/migrations"
)

// childEnv marks the re-run of this test binary that plays a test package
// with TEST_DATABASE_URL unset.
const childEnv = "PGTEST_CLUSTER_CHILD"

// TestServerURLStartsThrowawayCluster runs this test binary again with
// TEST_DATABASE_URL unset (and no Docker here): the child gets a working,
// migrated database from a cluster of the server binaries, says so in one line,
// and is then SIGKILLed, so no cleanup of its own runs; the cluster must still
// stop and its directory go.
func TestServerURLStartsThrowawayCluster(t *testing.T) {
	if os.Getenv(childEnv) != "" {
		require.Empty(t, os.Getenv(pgtest.EnvURL))
		db := pgtest.New(t, migrations.Labeling)
		var n int
		require.NoError(t, db.Pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_events`).Scan(&n))
		fmt.Println("pgtest-child: migrated database works")
		// As go test's -timeout or a Ctrl-C would: no cleanup runs.
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	t.Parallel()

	cmd := exec.Command(os.Args[0], "-test.run", "^TestServerURLStartsThrowawayCluster$", "-test.count=1", "-test.v")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, pgtest.EnvURL+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, childEnv+"=1")
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	require.Error(t, err, "the child kills itself")
	require.Contains(t, stdout.String(), "pgtest-child: migrated database works", "stdout:\n%s\nstderr:\n%s", stdout.String(), stderr.String())

	m := regexp.MustCompile(`(?m)^pgtest: TEST_DATABASE_URL unset; started a throwaway PostgreSQL \S+ cluster at 127\.0\.0\.1:([0-9]+) \(data in (\S+)\), stopped when the tests end$`).
		FindStringSubmatch(stderr.String())
	require.NotNil(t, m, "the one line saying so, in stderr:\n%s", stderr.String())
	addr, dir := "127.0.0.1:"+m[1], m[2]

	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return false
		}
		_, err = os.Stat(dir)
		return os.IsNotExist(err)
	}, time.Minute, 200*time.Millisecond, "after the binary died, nothing listens on %s and %s is gone", addr, dir)
}

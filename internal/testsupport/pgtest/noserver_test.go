package pgtest

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStartServerWithNoneOfTheThreeSaysHowToGetOne stands for a machine with no
// server binaries (and, here, no Docker): the failure names the three ways. Not
// parallel: it swaps pgLibGlob, which the parallel tests read.
func TestStartServerWithNoneOfTheThreeSaysHowToGetOne(t *testing.T) {
	if os.Getenv(EnvPGBin) != "" {
		t.Fatalf("unset %s to run this test: it stands for a machine without server binaries", EnvPGBin)
	}
	if _, err := os.Stat("/var/run/docker.sock"); err == nil {
		t.Fatal("a Docker socket is here: this test stands for a machine without Docker")
	}
	saved := pgLibGlob
	pgLibGlob = filepath.Join(t.TempDir(), "*", "bin")
	t.Cleanup(func() { pgLibGlob = saved })

	_, err := startServer()
	require.Error(t, err)
	msg := noServer(err)
	require.Contains(t, msg, "export TEST_DATABASE_URL='postgres://")
	require.Contains(t, msg, "apt-get install postgresql")
	require.Contains(t, msg, EnvPGBin)
	require.Contains(t, msg, "start Docker")
	require.Contains(t, msg, "testcontainers could not start a container")
}

package pgtest

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestStartServerWithNoneOfTheThreeSaysHowToGetOne stands for a machine with no
// server binaries and no Docker (both lookups replaced, so it holds on any
// machine): the failure names the three ways. Not parallel: it swaps
// pgLibGlob and containerStart, which the parallel tests read.
func TestStartServerWithNoneOfTheThreeSaysHowToGetOne(t *testing.T) {
	if os.Getenv(EnvPGBin) != "" {
		t.Fatalf("unset %s to run this test: it stands for a machine without server binaries", EnvPGBin)
	}
	savedGlob, savedStart := pgLibGlob, containerStart
	pgLibGlob = filepath.Join(t.TempDir(), "*", "bin")
	containerStart = func() (string, error) { return "", errors.New("Cannot connect to the Docker daemon") }
	t.Cleanup(func() { pgLibGlob, containerStart = savedGlob, savedStart })

	_, err := startServer()
	require.Error(t, err)
	msg := noServer(err)
	require.Contains(t, msg, "export TEST_DATABASE_URL='postgres://")
	require.Contains(t, msg, "apt-get install postgresql")
	require.Contains(t, msg, EnvPGBin)
	require.Contains(t, msg, "start Docker")
	require.Contains(t, msg, "testcontainers could not start a container")
}

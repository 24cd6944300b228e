package service

import (
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"
)

// readyz starts a server answering /readyz with status and returns its HTTP_ADDR
// in the form a container sets it: no host, only the port.
func readyz(t *testing.T, status int) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/readyz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	t.Cleanup(srv.Close)
	_, port, err := net.SplitHostPort(srv.Listener.Addr().String())
	require.NoError(t, err)
	return ":" + port
}

func TestHealthcheck(t *testing.T) {
	t.Parallel()

	t.Run("a ready server is healthy", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, Healthcheck(readyz(t, http.StatusOK)))
	})

	t.Run("a server answering 503 is unhealthy", func(t *testing.T) {
		t.Parallel()
		err := Healthcheck(readyz(t, http.StatusServiceUnavailable))
		require.ErrorContains(t, err, "503")
	})

	t.Run("an explicit host is used as given", func(t *testing.T) {
		t.Parallel()
		addr := readyz(t, http.StatusOK)
		require.NoError(t, Healthcheck("127.0.0.1"+addr))
	})

	t.Run("nothing listening is unhealthy", func(t *testing.T) {
		t.Parallel()
		// Take a free port, then close it so nothing listens there.
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		addr := ln.Addr().String()
		require.NoError(t, ln.Close())
		require.Error(t, Healthcheck(addr))
	})

	t.Run("an address without a port is an error naming HTTP_ADDR", func(t *testing.T) {
		t.Parallel()
		require.ErrorContains(t, Healthcheck("localhost"), "HTTP_ADDR")
	})
}

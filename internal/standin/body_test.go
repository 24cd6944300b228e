package standin_test

import (
	"bufio"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/internal/standin"
)

// TestBodiesRefusedUnread: a call whose body is multipart or another type
// than JSON is a 415, and one whose Content-Length is over 64 KiB a 413, both
// answered before a byte of the body is sent.
func TestBodiesRefusedUnread(t *testing.T) {
	t.Parallel()
	key := make([]byte, 32)
	_, err := rand.Read(key)
	require.NoError(t, err)
	srv, err := standin.Open(t.Context(), standin.Config{Secret: "whsec_" + base64.StdEncoding.EncodeToString(key), DB: filepath.Join(t.TempDir(), "p.db")}, slog.New(slog.DiscardHandler))
	require.NoError(t, err)
	t.Cleanup(func() { srv.Close() })
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)

	// Lengths over net/http's 256 KiB, up to which it would discard an unread
	// body before answering.
	for name, tc := range map[string]struct {
		contentType string
		want        int
	}{
		"a multipart body is 415":        {"multipart/form-data; boundary=x", http.StatusUnsupportedMediaType},
		"a form is 415":                  {"application/x-www-form-urlencoded", http.StatusUnsupportedMediaType},
		"JSON over 64 KiB is 413":        {"application/json", http.StatusRequestEntityTooLarge},
		"no type and over 64 KiB is 413": {"", http.StatusRequestEntityTooLarge},
	} {
		t.Run(name, func(t *testing.T) {
			conn, err := net.Dial("tcp", strings.TrimPrefix(ts.URL, "http://"))
			require.NoError(t, err)
			defer conn.Close()
			require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
			header := ""
			if tc.contentType != "" {
				header = "Content-Type: " + tc.contentType + "\r\n"
			}
			_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\n%sContent-Length: %d\r\n\r\n", standin.Path, header, 50<<20)
			require.NoError(t, err)
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			require.NoError(t, err)
			resp.Body.Close()
			require.Equal(t, tc.want, resp.StatusCode)
		})
	}
}

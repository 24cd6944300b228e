package wire_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/wire"
)

func TestRedactURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, raw, want string }{
		{"userinfo, query and fragment are dropped", "https://user:pw@provider.example:8443/hooks/in?token=s3cret&x=1#frag", "https://provider.example:8443/hooks/in"},
		{"a user name alone is dropped", "http://s3cret@billing:8081", "http://billing:8081"},
		{"a URL without them is unchanged", "http://billing:8081/base/", "http://billing:8081/base/"},
		{"an escaped path keeps its spelling", "http://h/a%2Fb?token=s3cret", "http://h/a%2Fb"},
		{"a NATS URL is cut the same way", "nats://user:pw@nats:4222?token=s3cret", "nats://nats:4222"},
		{"an unparsable port is cut by hand", "http://user:pw@h:port/p?token=s3cret", "http://h:port/p"},
		{"a bad escape is cut by hand", "http://user:pw@h/%zz?token=s3cret", "http://h/%zz"},
		{"no scheme: userinfo before the host is dropped", "user:pw@h:80/p?token=s3cret", "h:80/p"},
		{"an @ in the path is kept", "http://h/a@b?token=s3cret", "http://h/a@b"},
		{"empty stays empty", "", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			require.Equal(t, c.want, wire.RedactURL(c.raw))
		})
	}
}

func TestRedactURLs(t *testing.T) {
	t.Parallel()
	secret := "http://user:pw@127.0.0.1:1/hooks?token=s3cret"

	t.Run("an http.Client's error quotes the URL without its credentials", func(t *testing.T) {
		t.Parallel()
		// Port 1 on loopback: nothing listens, the dial is refused at once.
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, secret, nil)
		require.NoError(t, err)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
		require.Error(t, err)
		require.Contains(t, err.Error(), "s3cret", "Go's own text quotes the query")
		err = fmt.Errorf("call provider: %w", wire.RedactURLs(err))
		require.Contains(t, err.Error(), `Post "http://127.0.0.1:1/hooks": `)
		require.NotContains(t, err.Error(), "s3cret")
		require.NotContains(t, err.Error(), "pw")
		var ue *url.Error
		require.ErrorAs(t, err, &ue, "the chain is kept")
	})

	t.Run("every url.Error of a joined chain is rewritten, and errors.Is still sees the cause", func(t *testing.T) {
		t.Parallel()
		a := &url.Error{Op: "Post", URL: secret, Err: context.DeadlineExceeded}
		b := &url.Error{Op: "Get", URL: secret, Err: errors.New("refused")}
		err := fmt.Errorf("two: %w", wire.RedactURLs(errors.Join(a, b)))
		require.NotContains(t, err.Error(), "s3cret")
		require.NotContains(t, err.Error(), "pw")
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})

	t.Run("nil stays nil", func(t *testing.T) {
		t.Parallel()
		require.NoError(t, wire.RedactURLs(nil))
	})
}

func TestScrubber(t *testing.T) {
	t.Parallel()
	s := wire.NewScrubber("https://token-user:pa%20ss@h/p?token=s3cret-value&api_key=k%2Fey1&n=1")

	t.Run("the query, its values and the userinfo are hidden wherever repeated", func(t *testing.T) {
		t.Parallel()
		got := s.Hide("POST /p?token=s3cret-value&api_key=k%2Fey1&n=1 | s3cret-value | k/ey1 | token-user | pa ss | pa%20ss")
		require.Equal(t, "POST /p?*** | *** | *** | *** | *** | ***", got)
	})

	t.Run("values shorter than 4 bytes are left alone", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "n=1 of 1", s.Hide("n=1 of 1"))
	})

	t.Run("a URL without credentials hides nothing", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, "http://h/p", wire.NewScrubber("http://h/p").Hide("http://h/p"))
		require.Equal(t, "text", wire.Scrubber{}.Hide("text"))
	})

	t.Run("a snippet is bounded, on one line, and hides a secret the bound would cut", func(t *testing.T) {
		t.Parallel()
		body := strings.Repeat("x", 250) + " s3cret-value\n" + strings.Repeat("y", 1000)
		got := s.Snippet(strings.NewReader(body), 256)
		require.Equal(t, strings.Repeat("x", 250)+" *** y", got, "the secret is hidden whole, then the text cut")
		require.Equal(t, 256, len(s.Snippet(strings.NewReader(strings.Repeat("z", 1000)), 256)))
		require.Equal(t, "(empty body)", s.Snippet(strings.NewReader(" \n "), 256))
		require.Equal(t, strings.Repeat("é", 128), s.Snippet(strings.NewReader(strings.Repeat("é", 1000)), 257), "no broken character")
	})
}

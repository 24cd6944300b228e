package cli_test

import (
	"bytes"
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/cli"
)

func TestField(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"plain text, é and ✓":  "plain text, é and ✓",
		"a\tb\nc\rd":           `a\tb\nc\rd`,
		`back\slash`:           `back\\slash`,
		"not utf-8: \xff\xfe.": `not utf-8: \xff\xfe.`,
		`\x41 as written`:      `\\x41 as written`,
	} {
		require.Equal(t, want, cli.Field(in), "%q", in)
	}
}

func TestListing(t *testing.T) {
	t.Parallel()
	t.Run("rows are tab-separated, escaped, on stdout only", func(t *testing.T) {
		var out, note bytes.Buffer
		l := cli.NewListing(&out, &note, "no rows")
		l.Row("1", "a\tb", cli.Time(1_700_000_000_123))
		l.Close()
		require.Equal(t, "1\ta\\tb\t2023-11-14T22:13:20.123Z\n", out.String())
		require.Empty(t, note.String())
	})
	t.Run("an empty listing says so on stderr, stdout stays empty", func(t *testing.T) {
		var out, note bytes.Buffer
		cli.NewListing(&out, &note, "no rows").Close()
		require.Empty(t, out.String())
		require.Equal(t, "no rows\n", note.String())
	})
}

func TestBounded(t *testing.T) {
	t.Run("the context ends at the timeout", func(t *testing.T) {
		err := cli.Bounded(50*time.Millisecond, func(ctx context.Context) error {
			<-ctx.Done()
			return ctx.Err()
		})
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
	t.Run("a SIGTERM cancels the context instead of killing the process", func(t *testing.T) {
		err := cli.Bounded(time.Minute, func(ctx context.Context) error {
			require.NoError(t, syscall.Kill(syscall.Getpid(), syscall.SIGTERM))
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(30 * time.Second):
				return errors.New("the signal did not end the context")
			}
		})
		require.ErrorIs(t, err, context.Canceled)
	})
}

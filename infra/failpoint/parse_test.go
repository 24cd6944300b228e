package failpoint

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParse(t *testing.T) {
	t.Parallel()

	t.Run("reads actions and count prefixes", func(t *testing.T) {
		t.Parallel()
		m, err := Parse("a=exit; b=2*error;c=sleep(250ms)")
		require.NoError(t, err)
		require.Equal(t, "exit", m["a"].kind)
		require.Equal(t, "error", m["b"].kind)
		require.Equal(t, 2, m["b"].skip)
		require.Equal(t, 250*time.Millisecond, m["c"].sleep)
	})

	t.Run("rejects an unknown action", func(t *testing.T) {
		t.Parallel()
		_, err := Parse("a=crash")
		require.ErrorContains(t, err, "unknown action")
	})

}

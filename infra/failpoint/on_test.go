//go:build failpoints

package failpoint

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestInject(t *testing.T) {
	t.Run("error acts after the counted passes", func(t *testing.T) {
		m, err := Parse("p=2*error")
		require.NoError(t, err)
		old := armed
		armed = m
		t.Cleanup(func() { armed = old })
		require.NoError(t, Inject("p"))
		require.NoError(t, Inject("p"))
		require.ErrorIs(t, Inject("p"), ErrInjected)
		require.ErrorIs(t, Inject("p"), ErrInjected)
		require.NoError(t, Inject("other"))
	})
}

package fault_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/fault"
)

func TestCodeOf(t *testing.T) {
	t.Parallel()

	t.Run("finds the code through wrapping", func(t *testing.T) {
		t.Parallel()
		err := fmt.Errorf("create rule: %w", fault.Errorf(fault.Conflict, "taken"))
		require.Equal(t, fault.Conflict, fault.CodeOf(err))
	})

	t.Run("anything that is not a fault is internal", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, fault.Internal, fault.CodeOf(errors.New("boom")))
	})

	t.Run("the cause stays reachable but out of the message", func(t *testing.T) {
		t.Parallel()
		cause := errors.New("dial tcp 10.0.0.1:5432")
		err := fault.Wrap(fault.Unavailable, cause, "database unavailable")
		require.ErrorIs(t, err, cause)
		require.Equal(t, "database unavailable", err.Message)
	})
}

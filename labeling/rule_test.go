package labeling

import (
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/fault"
)

func TestParseIDs(t *testing.T) {
	t.Parallel()
	id := uuid.New()

	t.Run("the canonical form decodes in either case", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{id.String(), strings.ToUpper(id.String())} {
			org, err := ParseOrgID(s)
			require.NoError(t, err)
			require.Equal(t, id, org.UUID())
			require.Equal(t, id.String(), org.String())
		}
	})

	t.Run("other spellings and the nil UUID are invalid", func(t *testing.T) {
		t.Parallel()
		for _, s := range []string{
			"", "x", strings.ReplaceAll(id.String(), "-", ""), "{" + id.String() + "}",
			"urn:uuid:" + id.String(), uuid.Nil.String(), id.String() + " ",
		} {
			_, err := ParseRuleID(s)
			require.Equal(t, fault.Invalid, fault.CodeOf(err), "%q", s)
		}
	})
}

func TestNewRuleFrom(t *testing.T) {
	t.Parallel()

	t.Run("invalid UTF-8 is refused in every text field", func(t *testing.T) {
		t.Parallel()
		bad := "a\xffb"
		for _, f := range [][3]string{{bad, "p", "l"}, {"n", bad, "l"}, {"n", "p", bad}} {
			_, err := NewRuleFrom(uuid.NewString(), f[0], f[1], f[2])
			require.Equal(t, fault.Invalid, fault.CodeOf(err), "%q", f)
		}
	})

	t.Run("the limits are inclusive", func(t *testing.T) {
		t.Parallel()
		_, err := NewRuleFrom(uuid.NewString(), strings.Repeat("n", MaxNameLen), "p", strings.Repeat("l", MaxLabelLen))
		require.NoError(t, err)
	})
}

func TestFormatTime(t *testing.T) {
	t.Parallel()
	require.Equal(t, "1970-01-01T00:00:00.000Z", FormatTime(0))
	require.Equal(t, "2024-02-29T23:59:59.007Z", FormatTime(1709251199007))
}

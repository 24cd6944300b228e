package labeling

import (
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/sqldb"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/internal/testsupport/dbtest"
)

func TestPatternBounds(t *testing.T) {
	t.Parallel()
	dbtest.Each(t, func(t *testing.T, d sqldb.Dialect) {
		shared := setup(t, d)

		t.Run("a pattern of MaxPatternLen characters is accepted", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			pattern := strings.Repeat("界", MaxPatternLen) // counted in characters: 3000 bytes
			rec := b.do(t, http.MethodPost, rulesPath(b.org), createJSON(t, uuid.NewString(), "n", pattern, "l"))
			require.Equal(t, http.StatusCreated, rec.Code, rec.Body.String())
		})

		t.Run("a valid pattern one character longer is a 400 and is not compiled", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			rec := b.do(t, http.MethodPost, rulesPath(b.org),
				createJSON(t, uuid.NewString(), "n", strings.Repeat("a", MaxPatternLen+1), "l"))
			require.Equal(t, http.StatusBadRequest, rec.Code, rec.Body.String())
			require.Contains(t, decode[web.ErrorBody](t, rec).Error.Message, "at most 1000 characters")
		})

		t.Run("the error of an invalid pattern echoes only its start", func(t *testing.T) {
			t.Parallel()
			b := shared.withOrg()
			pattern := "(" + strings.Repeat("x", MaxPatternLen-1) // missing closing )
			rec := b.do(t, http.MethodPost, rulesPath(b.org), createJSON(t, uuid.NewString(), "n", pattern, "l"))
			require.Equal(t, http.StatusBadRequest, rec.Code)
			msg := decode[web.ErrorBody](t, rec).Error.Message
			require.Contains(t, msg, "not a valid RE2 expression")
			require.Less(t, len(msg), 200, msg)
		})
	})
}

// A 64 KB pattern (the body cap) used to cost about a second of CPU to compile;
// the cap refuses it before compiling.
func BenchmarkRefuseLongPattern(b *testing.B) {
	pattern := strings.Repeat("(a|b)", 60_000/5)
	for b.Loop() {
		_, _ = NewRuleFrom(uuid.NewString(), "n", pattern, "l")
	}
}

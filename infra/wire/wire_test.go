package wire_test

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/web"
	"github.com/acme/outboxpair/infra/wire"
)

func TestReceivedHeader(t *testing.T) {
	t.Parallel()
	id := uuid.New()
	const rest = `"occurredAt":1,"payload":{}`

	t.Run("an unknown top-level member is ignored, whatever its value", func(t *testing.T) {
		t.Parallel()
		var r wire.Received
		require.NoError(t, web.Unmarshal([]byte(`{"traceparent":"00-x","id":"`+id.String()+`","type":"T",`+rest+`,"source":{"v":[1]}}`), &r))
		got, typ, err := r.Header()
		require.NoError(t, err)
		require.Equal(t, id, got)
		require.Equal(t, "T", typ)
	})

	for name, body := range map[string]string{
		"an ID beside id":          `{"id":"` + id.String() + `","ID":"` + uuid.NewString() + `","type":"T",` + rest + `}`,
		"an ID instead of id":      `{"ID":"` + id.String() + `","type":"T",` + rest + `}`,
		"a TYPE beside type":       `{"id":"` + id.String() + `","type":"T","TYPE":"U",` + rest + `}`,
		"an OccurredAt beside it":  `{"id":"` + id.String() + `","type":"T","OccurredAt":2,` + rest + `}`,
		"a PayLoad beside payload": `{"id":"` + id.String() + `","type":"T","PayLoad":{},` + rest + `}`,
		"a tYPE instead of type":   `{"id":"` + id.String() + `","tYPE":"T",` + rest + `}`,
	} {
		t.Run(name+" is refused, never taken for the field", func(t *testing.T) {
			t.Parallel()
			var r wire.Received
			require.NoError(t, web.Unmarshal([]byte(body), &r), "the decoder keeps it; Header refuses it")
			_, _, err := r.Header()
			require.Error(t, err)
			require.Equal(t, fault.Invalid, fault.CodeOf(err))
			require.Contains(t, err.Error(), "letter case")
		})
	}
}

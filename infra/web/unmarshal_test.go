package web_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/fault"
	"github.com/acme/outboxpair/infra/web"
)

// TestUnmarshalRules checks each rule of DecodeJSON's strictness inside a
// json.RawMessage member as well as in the typed ones: the unmarshal's one
// pass must refuse what the token pass before it refused.
func TestUnmarshalRules(t *testing.T) {
	t.Parallel()
	type body struct {
		Name    string          `json:"name"`
		Payload json.RawMessage `json:"payload"`
	}
	cases := []struct {
		name, body, message string // message "" means accepted
	}{
		{"accepts a body without NUL", `{"name":"a","payload":{"x":["b",1]}}`, ""},
		{"accepts an escaped backslash before u0000", `{"name":"a\\u0000","payload":{"x":"\\u0000"}}`, ""},
		{"refuses a member given twice in the raw payload", `{"name":"a","payload":{"x":1,"x":2}}`, `field "/payload/x": a member is given more than once`},
		{"refuses a member given twice at the top", `{"name":"a","name":"b","payload":{}}`, `field "/name": a member is given more than once`},
		{"refuses NUL in a typed string", `{"name":"a\u0000","payload":{}}`, `field "/name" must not contain NUL (U+0000)`},
		{"refuses NUL deep in the raw payload", `{"name":"a","payload":{"x":["b","c\u0000"]}}`, `field "/payload/x/1" must not contain NUL (U+0000)`},
		{"refuses NUL in a member name", `{"name":"a","payload":{"x\u0000":1}}`, `must not contain NUL (U+0000)`},
		{"refuses invalid UTF-8 in the raw payload", "{\"name\":\"a\",\"payload\":{\"x\":\"\xff\"}}", `must be valid UTF-8`},
		{"refuses a lone surrogate in the raw payload", `{"name":"a","payload":{"x":"\ud800"}}`, `must be valid UTF-8`},
		{"refuses a duplicate before a NUL with the duplicate", `{"name":"a","name":"b\u0000","payload":{}}`, `a member is given more than once`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var v body
			err := web.Unmarshal([]byte(tc.body), &v)
			if tc.message == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Equal(t, fault.Invalid, fault.CodeOf(err))
			require.Contains(t, err.Error(), tc.message)
		})
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func answer(t *testing.T, queries ...Query) []Answer {
	t.Helper()
	in, err := json.Marshal(queries)
	require.NoError(t, err)
	var out bytes.Buffer
	require.NoError(t, run(bytes.NewReader(in), &out))
	var answers []Answer
	require.NoError(t, json.Unmarshal(out.Bytes(), &answers))
	require.Len(t, answers, len(queries))
	return answers
}

func TestNames(t *testing.T) {
	t.Parallel()

	t.Run("an expression names every metric of its selectors, once, sorted, range selectors and binary operands included", func(t *testing.T) {
		t.Parallel()
		a := answer(t, Query{Expr: `sum by (job) (rate(b_total{code=~"5.."}[5m])) / sum by (job) (rate(b_total[5m])) > 0.01 or a_seconds > 3`})
		require.Equal(t, []Answer{{Names: []string{"a_seconds", "b_total"}}}, a)
	})

	t.Run("a histogram quantile names the _bucket series", func(t *testing.T) {
		t.Parallel()
		a := answer(t, Query{Expr: `histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket[5m])))`})
		require.Equal(t, []string{"x_seconds_bucket"}, a[0].Names)
	})

	t.Run("a series names its metric, with a name given as __name__ too", func(t *testing.T) {
		t.Parallel()
		a := answer(t, Query{Series: `outbox_failed_rows{job="labeling"}`}, Query{Expr: `{__name__="up",job="x"}`})
		require.Equal(t, []string{"outbox_failed_rows"}, a[0].Names)
		require.Equal(t, []string{"up"}, a[1].Names)
	})

	t.Run("a selector without a metric name, a syntax error and an empty query are errors", func(t *testing.T) {
		t.Parallel()
		a := answer(t, Query{Expr: `{job="x"}`}, Query{Expr: `sum(rate(x[5m])`}, Query{}, Query{Series: `{job="x"}`})
		for _, ans := range a {
			require.Empty(t, ans.Names)
			require.NotEmpty(t, ans.Error)
		}
		require.True(t, strings.Contains(a[0].Error, "without a metric name"), a[0].Error)
	})

	t.Run("input that is not a JSON array of queries is refused", func(t *testing.T) {
		t.Parallel()
		require.Error(t, run(strings.NewReader(`{"expr":"x"}`), &bytes.Buffer{}))
	})
}

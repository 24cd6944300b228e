// Command promql prints the metric names that PromQL expressions and series
// descriptions name, as Prometheus's own parser reads them: deploy's tests give
// it every alert's and dashboard panel's expression and every series of the
// alerts' unit tests, and hold the names to what the services export.
//
// It reads a JSON array on stdin, each element {"expr": "..."} or
// {"series": "..."} (a series as promtool's input_series writes it,
// name{labels}), and writes a JSON array of answers in the same order, each
// {"names": [...]} or {"error": "..."}. It is a module of its own (see go.mod)
// so that the main module's build does not carry Prometheus's.
package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// Query is one element of the input: an expression or a series.
type Query struct {
	Expr   string `json:"expr,omitempty"`
	Series string `json:"series,omitempty"`
}

// Answer is the metric names a Query names, sorted and each once, or why it
// could not be read.
type Answer struct {
	Names []string `json:"names,omitempty"`
	Error string   `json:"error,omitempty"`
}

func main() {
	if err := run(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "promql:", err)
		os.Exit(2)
	}
}

func run(in io.Reader, out io.Writer) error {
	var queries []Query
	if err := json.NewDecoder(in).Decode(&queries); err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	p := parser.NewParser(parser.Options{})
	answers := make([]Answer, len(queries))
	for i, q := range queries {
		names, err := namesOf(p, q)
		if err != nil {
			answers[i].Error = err.Error()
			continue
		}
		answers[i].Names = names
	}
	return json.NewEncoder(out).Encode(answers)
}

// namesOf returns the metric names q selects. A selector without a name
// ({job="x"}, {__name__=~"..."}) is an error: no test could say which
// metrics it reads.
func namesOf(p parser.Parser, q Query) ([]string, error) {
	switch {
	case q.Expr != "" && q.Series != "":
		return nil, errors.New("a query is an expr or a series, not both")
	case q.Series != "":
		lbls, err := p.ParseMetric(q.Series)
		if err != nil {
			return nil, err
		}
		name := lbls.Get(model.MetricNameLabel)
		if name == "" {
			return nil, fmt.Errorf("%s: a series without a metric name", q.Series)
		}
		return []string{name}, nil
	case q.Expr != "":
		expr, err := p.ParseExpr(q.Expr)
		if err != nil {
			return nil, err
		}
		var names []string
		var unnamed error
		parser.Inspect(expr, func(node parser.Node, _ []parser.Node) error {
			vs, ok := node.(*parser.VectorSelector)
			if !ok {
				return nil
			}
			name := vs.Name
			for _, m := range vs.LabelMatchers {
				if m.Name == model.MetricNameLabel && m.Type == labels.MatchEqual {
					name = m.Value
				}
			}
			if name == "" {
				unnamed = fmt.Errorf("%s: a selector without a metric name", vs)
			}
			names = append(names, name)
			return nil
		})
		if unnamed != nil {
			return nil, unnamed
		}
		slices.Sort(names)
		return slices.Compact(names), nil
	}
	return nil, errors.New("an empty query")
}

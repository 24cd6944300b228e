// Package workflow lints .github/workflows/ci.yml with actionlint, as a library.
// It is a module of its own (see go.mod); what the workflow runs is checked in
// deploy/ci_test.go, beside the README and .ci/run checks it shares helpers with.
package workflow

import (
	"io"
	"testing"

	"github.com/rhysd/actionlint"
	"github.com/stretchr/testify/require"
)

func TestActionlint(t *testing.T) {
	t.Parallel()
	const path = "../../.github/workflows/ci.yml"
	linter, err := actionlint.NewLinter(io.Discard, &actionlint.LinterOptions{})
	require.NoError(t, err)
	errs, err := linter.LintFile(path, nil)
	require.NoError(t, err)
	for _, e := range errs {
		t.Errorf("%s:%d:%d: %s [%s]", path, e.Line, e.Column, e.Message, e.Kind)
	}
}

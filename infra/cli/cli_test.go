package cli_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/acme/outboxpair/infra/cli"
)

// say is an action that prints what it was given.
func say(what string) cli.Action {
	return func(lookup cli.Lookup, stdout, _ io.Writer) error {
		v, _ := lookup("WHO")
		fmt.Fprintf(stdout, "%s %s\n", what, v)
		return nil
	}
}

// tool is a program with each kind of row: a default, a command with
// arguments, one with a flag, a group.
var tool = cli.Program{
	Name:    "tool",
	Default: "serve",
	Commands: []cli.Command{
		{Name: "serve", Summary: "serve until stopped", Run: say("serving")},
		{Name: "fail", Summary: "fail with a message on\ntwo lines", Run: func(cli.Lookup, io.Writer, io.Writer) error {
			return errors.New("it broke:\n  badly")
		}},
		{Name: "echo", Args: "WORD...", Summary: "print the words", Parse: cli.NoFlags(func(args []string) (cli.Action, error) {
			if len(args) == 0 {
				return nil, errors.New("echo needs a word")
			}
			return say(strings.Join(args, " ")), nil
		})},
		{Name: "rows list", Summary: "list the rows", Run: say("rows")},
		{Name: "rows drop", Args: "ID...", Summary: "drop these rows", Parse: func(fs *flag.FlagSet) func([]string) (cli.Action, error) {
			all := fs.Bool("all", false, "drop every row (no ID with it)")
			limit := fs.Int("limit", 10, "drop at most `N` rows")
			return func(args []string) (cli.Action, error) {
				return say(fmt.Sprintf("drop all=%t limit=%d %q", *all, *limit, args)), nil
			}
		}},
	},
	Environment: []string{"WHO, WHERE", "tracing: " + strings.Repeat("OTEL_SOMETHING_LONG, ", 8) + "OTEL_LAST"},
}

func runTool(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = tool.Run(args, func(string) (string, bool) { return "me", true }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestRun(t *testing.T) {
	t.Parallel()

	t.Run("no arguments run the default command", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runTool()
		require.Equal(t, cli.ExitOK, code, stderr)
		require.Equal(t, "serving me\n", stdout)
	})

	t.Run("each command runs with its arguments and flags", func(t *testing.T) {
		t.Parallel()
		for args, want := range map[string]string{
			"serve":                      "serving me\n",
			"echo a b":                   "a b me\n",
			"rows list":                  "rows me\n",
			"rows drop x y":              `drop all=false limit=10 ["x" "y"] me` + "\n",
			"rows drop --all":            "drop all=true limit=10 [] me\n",
			"rows drop -limit 3 x":       `drop all=false limit=3 ["x"] me` + "\n",
			"rows drop --limit=3 -- -x":  `drop all=false limit=3 ["-x"] me` + "\n",
			"rows drop x --all":          `drop all=false limit=10 ["x" "--all"] me` + "\n",
			"rows drop --all=false --  ": "drop all=false limit=10 [] me\n",
		} {
			code, stdout, stderr := runTool(strings.Fields(args)...)
			require.Equal(t, cli.ExitOK, code, "%s: %s", args, stderr)
			require.Equal(t, want, stdout, args)
			require.Empty(t, stderr, args)
		}
	})

	t.Run("help at any level prints the usage on stdout and exits 0", func(t *testing.T) {
		t.Parallel()
		for _, args := range []string{"help", "-h", "--help", "-help", "serve -h", "rows -h", "rows drop --help", "rows drop -h x", "-h bogus"} {
			code, stdout, stderr := runTool(strings.Fields(args)...)
			require.Equal(t, cli.ExitOK, code, args)
			require.Equal(t, tool.Usage(), stdout, args)
			require.Empty(t, stderr, args)
		}
	})

	t.Run("a usage error prints its message and the help command of its topic on stderr, two lines, and exits 2", func(t *testing.T) {
		t.Parallel()
		for args, want := range map[string][2]string{
			"bogus":            {`unknown command "bogus"`, "tool help"},
			"-x":               {`flag provided but not defined: -x`, "tool help"},
			"serve now":        {`serve takes no arguments, got ["now"]`, "tool help serve"},
			"serve --fast":     {`serve: flag provided but not defined: -fast`, "tool help serve"},
			"echo":             {`echo needs a word`, "tool help echo"},
			"rows":             {`rows needs a subcommand: list or drop`, "tool help rows"},
			"rows bogus":       {`unknown rows subcommand "bogus"`, "tool help rows"},
			"rows --x":         {`rows: flag provided but not defined: -x`, "tool help rows"},
			"rows drop --none": {`rows drop: flag provided but not defined: -none`, "tool help rows"},
			"rows drop -limit": {`rows drop: flag needs an argument: -limit`, "tool help rows"},
			"rows drop -all=3": {`rows drop: invalid boolean value "3" for -all: parse error`, "tool help rows"},
			"help me":          {`help: no command "me"`, "tool help"},
			"help rows nope":   {`help: no command "rows nope"`, "tool help"},
		} {
			code, stdout, stderr := runTool(strings.Fields(args)...)
			require.Equal(t, cli.ExitUsage, code, args)
			require.Empty(t, stdout, args)
			require.Equal(t, "tool: "+want[0]+"\nrun \""+want[1]+"\" for the usage\n", stderr, args)
		}
	})

	t.Run("help COMMAND prints that command's part of the usage, and the hint of every usage error runs", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runTool("help", "rows")
		require.Equal(t, cli.ExitOK, code, stderr)
		require.Contains(t, stdout, "rows list")
		require.Contains(t, stdout, "rows drop --all")
		require.NotContains(t, stdout, "serve until stopped")
		require.Contains(t, stdout, "WHO, WHERE", "the configuration section is part of every usage")
		code, stdout, _ = runTool("help", "rows", "drop")
		require.Equal(t, cli.ExitOK, code)
		require.NotContains(t, stdout, "rows list")
		require.Contains(t, stdout, "rows drop ID...")
	})

	t.Run("a failed action prints one line on stderr and exits 1", func(t *testing.T) {
		t.Parallel()
		code, stdout, stderr := runTool("fail")
		require.Equal(t, cli.ExitFail, code)
		require.Empty(t, stdout)
		require.Equal(t, "tool: it broke: badly\n", stderr)
	})
}

func TestUsage(t *testing.T) {
	t.Parallel()
	usage := tool.Usage()

	t.Run("is generated from the table: every command, its arguments, its flags, and the default marked", func(t *testing.T) {
		t.Parallel()
		require.Equal(t, `usage: tool [command]

commands:
  serve                serve until stopped (the default)
  fail                 fail with a message on two lines
  echo WORD...         print the words
  rows list            list the rows
  rows drop ID...      drop these rows
  rows drop --all      drop every row (no ID with it)
  rows drop --limit N  drop at most N rows
  help [COMMAND]       print the usage (only COMMAND's with it) and exit (also
                       -h, --help)

configuration (environment):
  WHO, WHERE
  tracing: OTEL_SOMETHING_LONG, OTEL_SOMETHING_LONG, OTEL_SOMETHING_LONG,
    OTEL_SOMETHING_LONG, OTEL_SOMETHING_LONG, OTEL_SOMETHING_LONG,
    OTEL_SOMETHING_LONG, OTEL_SOMETHING_LONG, OTEL_LAST
`, usage)
	})

	t.Run("a command added to the table is in it", func(t *testing.T) {
		t.Parallel()
		more := tool
		more.Commands = append(more.Commands[:len(more.Commands):len(more.Commands)],
			cli.Command{Name: "rows count", Summary: "count the rows", Run: say("3")})
		require.Contains(t, more.Usage(), "\n  rows count           count the rows\n")
		require.NotContains(t, usage, "rows count")
	})

	t.Run("wraps long summaries under their column", func(t *testing.T) {
		t.Parallel()
		long := cli.Program{Name: "long", Default: "x", Commands: []cli.Command{
			{Name: "x", Summary: strings.Repeat("word ", 30), Run: say("x")},
		}}
		for _, line := range strings.Split(strings.TrimSuffix(long.Usage(), "\n"), "\n") {
			require.LessOrEqual(t, len(line), 80, line)
		}
		require.Contains(t, long.Usage(), "\n                  word word")
	})
}

// Package cli runs a binary's subcommands from one table (contract section 1):
// each command's flags are a standard library flag.FlagSet, and the usage text is
// generated from the same table, its flag sets and the configuration variables the
// binary declares, so a command, a flag or a variable cannot be missing from it.
package cli

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
)

// Exit codes (contract section 1): a usage error is 2, so scripts can tell it from
// a failed run.
const (
	ExitOK    = 0
	ExitFail  = 1
	ExitUsage = 2
)

// Lookup reads one environment variable; os.LookupEnv fits. It is the
// plain function type (infra/env.Lookup is the same), so an action reads
// the environment without this package importing infra/env.
type Lookup = func(name string) (string, bool)

// Action runs a command whose arguments were accepted: it reads the configuration
// it needs through lookup and writes its output to stdout, and a note for the
// operator that is not output (the database it opened, OpenDatabase; an empty
// listing's "no failed rows") to stderr.
// An error is a failure, exit 1.
type Action func(lookup Lookup, stdout, stderr io.Writer) error

// Command is one row of a program's table.
type Command struct {
	// Name is the words that select it: "migrate", "outbox requeue". Commands
	// whose names share a first word make a group ("outbox"), which is not a
	// command itself.
	Name string
	// Args is the usage's synopsis of its positional arguments ("ID..."), empty
	// when it takes none.
	Args string
	// Summary is its line in the usage.
	Summary string
	// Run is the action of a command that takes neither flags nor arguments;
	// any argument is then a usage error.
	Run Action
	// Parse, instead of Run, declares the command's flags on fs and returns
	// the parser of the arguments left after them, whose error is a usage
	// error. Each run gets a new flag set, so nothing of one run is kept;
	// Usage calls it too, to list the flags, so it must only declare them.
	Parse func(fs *flag.FlagSet) func(args []string) (Action, error)
}

// NoFlags is the Parse of a command that takes arguments but no flag: parse
// gets them all.
func NoFlags(parse func(args []string) (Action, error)) func(*flag.FlagSet) func([]string) (Action, error) {
	return func(*flag.FlagSet) func([]string) (Action, error) { return parse }
}

// Program is a binary's command line: its table and what it reads.
type Program struct {
	Name string // the binary, which prefixes every message
	// Default is the name of the command run without arguments.
	Default  string
	Commands []Command
	// Environment is the usage's configuration section, one paragraph a
	// line (infra/env's Service.Usage).
	Environment []string
}

// help is the command every program has; Program.parse runs it (its words name
// the commands whose usage it prints).
var help = Command{
	Name:    "help",
	Args:    "[COMMAND]",
	Summary: "print the usage (only COMMAND's with it) and exit (also -h, --help)",
	Run:     func(Lookup, io.Writer, io.Writer) error { return flag.ErrHelp },
}

// helpTopic asks for the usage of the commands whose names start with words.
type helpTopic struct{ words []string }

func (h helpTopic) Error() string { return "help " + strings.Join(h.words, " ") }

// usageError is a usage error about the command (or group) topic, "" when the
// words name none: the hint line points at that command's help.
type usageError struct {
	topic string
	err   error
}

func (u usageError) Error() string { return u.err.Error() }
func (u usageError) Unwrap() error { return u.err }

// Run is the whole program: it parses args against the table and runs the
// command. Help (help, -h, --help, at any level) prints the usage on stdout
// and exits 0 (help COMMAND: that command's part of it); a usage error prints
// two lines on stderr, its message and the help command to run (the usage
// itself would scroll the message away), and exits 2; an action's error
// prints one line on stderr and exits 1.
func (p *Program) Run(args []string, lookup Lookup, stdout, stderr io.Writer) int {
	act, err := p.parse(args)
	var topic helpTopic
	switch {
	case errors.As(err, &topic):
		fmt.Fprint(stdout, p.usage(topic.words))
		return ExitOK
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, p.Usage())
		return ExitOK
	case err != nil:
		hint := p.Name + " help"
		var u usageError
		if errors.As(err, &u) && u.topic != "" {
			hint += " " + u.topic
		}
		fmt.Fprintf(stderr, "%s: %v\nrun %q for the usage\n", p.Name, err, hint)
		return ExitUsage
	}
	if err := act(lookup, stdout, stderr); err != nil {
		// One line, as the contract asks of start-up failures and as log
		// collectors expect of stderr.
		fmt.Fprintf(stderr, "%s: %s\n", p.Name, strings.Join(strings.Fields(err.Error()), " "))
		return ExitFail
	}
	return ExitOK
}

func (p *Program) parse(args []string) (Action, error) {
	// The program's own flag set defines no flag: it answers -h and refuses
	// any other flag before the command's name.
	top := flagSet(p.Name)
	if err := top.Parse(args); err != nil {
		return nil, err
	}
	words := top.Args()
	if len(words) == 0 {
		words = []string{p.Default}
	}
	if words[0] == help.Name {
		if len(words) > 1 && p.usage(words[1:]) == "" {
			return nil, usageError{err: fmt.Errorf("help: no command %q", strings.Join(words[1:], " "))}
		}
		return nil, helpTopic{words[1:]}
	}
	c, rest, err := p.find(words)
	if err != nil {
		return nil, err
	}
	// The hint of a usage error: the command's group ("outbox"), or the command.
	topic := strings.Fields(c.Name)[0]
	fs := flagSet(c.Name)
	parse := c.parser(fs)
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, err
		}
		return nil, usageError{topic, fmt.Errorf("%s: %w", c.Name, err)}
	}
	act, err := parse(fs.Args())
	if err != nil {
		return nil, usageError{topic, err}
	}
	return act, nil
}

// find returns the command that words name and the words after its name.
func (p *Program) find(words []string) (Command, []string, error) {
	var group []string
	for _, c := range p.table() {
		name := strings.Fields(c.Name)
		if len(words) >= len(name) && slices.Equal(words[:len(name)], name) {
			return c, words[len(name):], nil
		}
		if len(name) > 1 && name[0] == words[0] {
			group = append(group, name[1])
		}
	}
	if len(group) == 0 {
		return Command{}, nil, usageError{err: fmt.Errorf("unknown command %q", words[0])}
	}
	// A group's name without one of its commands; -h after it is help.
	fs := flagSet(words[0])
	if err := fs.Parse(words[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return Command{}, nil, err
		}
		return Command{}, nil, usageError{words[0], fmt.Errorf("%s: %w", words[0], err)}
	}
	if fs.NArg() == 0 {
		return Command{}, nil, usageError{words[0], fmt.Errorf("%s needs a subcommand: %s", words[0], orList(group))}
	}
	return Command{}, nil, usageError{words[0], fmt.Errorf("unknown %s subcommand %q", words[0], fs.Arg(0))}
}

// table is the program's commands and help.
func (p *Program) table() []Command { return append(slices.Clip(p.Commands), help) }

// parser declares c's flags on fs and returns the parser of its arguments.
func (c Command) parser(fs *flag.FlagSet) func([]string) (Action, error) {
	if c.Parse != nil {
		return c.Parse(fs)
	}
	return func(args []string) (Action, error) {
		if len(args) > 0 {
			return nil, fmt.Errorf("%s takes no arguments, got %q", c.Name, args)
		}
		return c.Run, nil
	}
}

// flagSet is a flag set whose errors are returned, never printed: Run prints
// them once, with the usage this package generates.
func flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

func orList(words []string) string {
	if len(words) == 1 {
		return words[0]
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// lineWidth is where the usage wraps its lines.
const lineWidth = 80

// Usage is the program's usage text, generated from its table: a line for each
// command (with its arguments) and for each flag its flag set declares, then
// the configuration paragraphs.
func (p *Program) Usage() string { return p.usage(nil) }

// usage is the usage of the commands whose names start with words (all of them
// when there are none), "" when no command does.
func (p *Program) usage(words []string) string {
	type row struct{ left, right string }
	var rows []row
	for _, c := range p.table() {
		if name := strings.Fields(c.Name); len(name) < len(words) || !slices.Equal(name[:len(words)], words) {
			continue
		}
		left, summary := c.Name, c.Summary
		if c.Args != "" {
			left += " " + c.Args
		}
		if c.Name == p.Default {
			summary += " (the default)"
		}
		rows = append(rows, row{left, summary})
		fs := flagSet(c.Name)
		c.parser(fs)
		fs.VisitAll(func(f *flag.Flag) {
			arg, usage := flag.UnquoteUsage(f)
			left := c.Name + " --" + f.Name
			if arg != "" {
				left += " " + arg
			}
			rows = append(rows, row{left, usage})
		})
	}
	if len(rows) == 0 {
		return ""
	}
	width := 0
	for _, r := range rows {
		width = max(width, len(r.left))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "usage: %s [command]\n\ncommands:\n", p.Name)
	for _, r := range rows {
		first := fmt.Sprintf("  %-*s  ", width, r.left)
		wrap(&b, first, strings.Repeat(" ", len(first)), r.right)
	}
	b.WriteString("\nconfiguration (environment):\n")
	for _, paragraph := range p.Environment {
		wrap(&b, "  ", "    ", paragraph)
	}
	return b.String()
}

// wrap writes text after first, breaking it between words before lineWidth and
// starting each further line with indent; a word longer than a line stays whole.
func wrap(b *strings.Builder, first, indent, text string) {
	line := first
	fresh := true // nothing of text is on line yet
	for _, word := range strings.Fields(text) {
		if !fresh && len(line)+1+len(word) > lineWidth {
			b.WriteString(line + "\n")
			line, fresh = indent, true
		}
		if !fresh {
			line += " "
		}
		line += word
		fresh = false
	}
	b.WriteString(line + "\n")
}

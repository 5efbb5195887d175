// Package cli runs the command groups of a binary (vendor tags, vendor
// cluster): each subcommand has a usage line that names its arguments and
// flags, a summary for the binary's help, and what runs it; a group parses
// the command line, loads the configuration and says what was wrong with
// exit code 2.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// Command is one verb of a command group; C is the configuration it runs
// with.
type Command[C any] struct {
	Name string
	// Synopsis is its usage line; each <argument> in it is a positional
	// argument it takes, and each of its flags is named in it.
	Synopsis string
	// Summary says what it does in a few words, for the binary's help.
	Summary string
	// Positional: its arguments may look like flags (set-step <tag> -5),
	// so it takes no flags.
	Positional bool
	// Help, when set, is what -h prints, in place of the synopsis and
	// the flags.
	Help string
	// Flags defines its flags on fs and returns what runs it.
	Flags func(fs *flag.FlagSet) Runner[C]
}

// Runner runs a subcommand with its positional arguments.
type Runner[C any] func(ctx context.Context, cfg C, pos []string, w io.Writer) error

// UsageError is a mistake in the command line: exit code 2.
type UsageError struct{ msg string }

func (e UsageError) Error() string { return e.msg }

// Usagef is a UsageError.
func Usagef(format string, a ...any) error { return UsageError{fmt.Sprintf(format, a...)} }

// Group is a command group: `<binary> <Name> <subcommand> ...`.
type Group[C any] struct {
	Binary, Name string
	Usage        string // what -h prints
	Commands     []Command[C]
	// Config loads the configuration; its error is a usage error that
	// ConfigHint follows.
	Config     func() (C, error)
	ConfigHint string
	// UsageErrs are the errors of the subcommands that are usage errors too.
	UsageErrs []error
}

// Run runs the group's subcommand named by args[0]: its help, the
// configuration, the subcommand. It returns the exit code: 0 done, 1
// failed, 2 a mistake in the command line (which it says, with the
// subcommand's usage line).
func (g Group[C]) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintf(stderr, "%s %s: which subcommand? %s\n\n%s", g.Binary, g.Name, g.names(), g.Usage)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, g.Usage)
		return 0
	}
	sub, ok := g.find(args[0])
	if !ok {
		fmt.Fprintf(stderr, "%s %s: unknown subcommand %q: want %s\n(%s %s -h explains each)\n", g.Binary, g.Name, args[0], g.names(), g.Binary, g.Name)
		return 2
	}
	pos, run, err := sub.parse(g.Binary+" "+sub.Name, args[1:], stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err == nil {
		var cfg C
		if cfg, err = g.Config(); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n%s\n", g.Binary, err, g.ConfigHint)
			return 2
		}
		err = run(ctx, cfg, pos, stdout)
	}
	switch {
	case err == nil:
		return 0
	case g.usage(err):
		fmt.Fprintf(stderr, "%s %s: %v\nusage: %s\n", g.Binary, g.Name, err, sub.Synopsis)
		return 2
	default:
		fmt.Fprintf(stderr, "%s %s: %v\n", g.Binary, g.Name, err)
		return 1
	}
}

func (g Group[C]) usage(err error) bool {
	var u UsageError
	if errors.As(err, &u) {
		return true
	}
	for _, e := range g.UsageErrs {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (g Group[C]) find(name string) (Command[C], bool) {
	for _, s := range g.Commands {
		if s.Name == name {
			return s, true
		}
	}
	return Command[C]{}, false
}

// names lists the subcommands: "add, list or delete".
func (g Group[C]) names() string {
	var b strings.Builder
	for i, s := range g.Commands {
		switch {
		case i == 0:
		case i == len(g.Commands)-1:
			b.WriteString(" or ")
		default:
			b.WriteString(", ")
		}
		b.WriteString(s.Name)
	}
	return b.String()
}

// parse parses the subcommand's flags and counts its positional arguments;
// -h prints its usage and flags (flag.ErrHelp).
func (s Command[C]) parse(name string, args []string, stdout io.Writer) ([]string, Runner[C], error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	run := s.Flags(fs)
	var pos []string
	var err error
	if s.Positional {
		pos = args
		if len(pos) == 1 && (pos[0] == "-h" || pos[0] == "--help") {
			err = flag.ErrHelp
		}
	} else {
		pos, err = parseInterspersed(fs, args)
	}
	if errors.Is(err, flag.ErrHelp) && s.Help != "" {
		fmt.Fprint(stdout, s.Help)
		return nil, nil, err
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: %s\n", s.Synopsis)
		if n := countFlags(fs); n > 0 {
			fmt.Fprintln(stdout, "\nFlags:")
			fs.SetOutput(stdout)
			fs.PrintDefaults()
		}
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, Usagef("%v", err)
	}
	if want, most := Arguments(s.Synopsis); len(pos) < want || len(pos) > most {
		return nil, nil, Usagef("%s takes %d argument(s), got %d", s.Name, want, len(pos))
	}
	return pos, run, nil
}

// Arguments counts the <arguments> of a synopsis: those in a [-flag ...]
// group are the flag's value, those in other [brackets] optional, the
// others required.
func Arguments(synopsis string) (required, most int) {
	depth, flagDepth := 0, 0 // flagDepth: the depth of the [-flag group we are in, 0 if none
	for i := 0; i < len(synopsis); i++ {
		switch c := synopsis[i]; {
		case c == '[':
			depth++
			if flagDepth == 0 && i+1 < len(synopsis) && synopsis[i+1] == '-' {
				flagDepth = depth
			}
		case c == ']':
			if depth == flagDepth {
				flagDepth = 0
			}
			depth--
		case c == '<' && flagDepth == 0:
			most++
			if depth == 0 {
				required++
			}
		}
	}
	return required, most
}

func countFlags(fs *flag.FlagSet) int {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n
}

// parseInterspersed parses flags before, between and after positional
// arguments, so that `tags add order -step 1000` works.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}
